from services.retrieval.main import main

main()
