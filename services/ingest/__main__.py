from services.ingest.main import main

main()
