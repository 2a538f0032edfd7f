from services.graph.main import main

main()
