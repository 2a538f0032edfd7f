from services.queryspace.main import main

main()
