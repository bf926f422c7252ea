"""tpu-perf's version, at the bottom of the package: the CLI, the dashboard's cache keys and saved
baselines read it without importing the package root (which sits above them all)."""

__version__ = "0.1.0"
