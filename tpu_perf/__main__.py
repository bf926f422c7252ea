from tpu_perf.cli import main

main()
