"""Trace ingestion: XSpace (`*.xplane.pb`) and Kineto (`*.json`, `*.json.gz`) into run tables."""

from tpu_perf.traces.tables import TraceTables

__all__ = ["TraceTables"]
