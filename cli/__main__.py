from softcuda_cli import main

main()
