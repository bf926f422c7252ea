from pkgtrain.train import main

main()
