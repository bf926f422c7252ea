"""CLI commands beyond record/report/ls, one module each; listed in `tpu_perf.cli.COMMAND_MODULES`."""
