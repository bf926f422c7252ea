"""`python -m tpu_perf` and the `tpu-perf` command: a Ctrl-C while the CLI is still importing ends
it in one line, exit 130, as one while a command runs does (`tpu_perf.cli.main`)."""

import sys


def run() -> None:
    try:
        from tpu_perf.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("tpu-perf: interrupted\n")
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
