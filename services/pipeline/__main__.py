from services.pipeline.main import main

main()
