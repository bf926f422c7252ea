"""The run an imported trace becomes (`tpu-perf import`, one host's shard of an imported job):
its `steps` table from the trace's step markers, and its first run.json."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tpu_perf.store import layout
from tpu_perf.traces.ingest import hardware


def steps_from_trace(device_steps: pd.DataFrame) -> pd.DataFrame:
    """The run's `steps` table from the trace's step markers (one lane: the first device's, else the host's).

    Steps tile as recorded ones do: each ends where the next marker starts (the last at its own
    end), so `duration_s` is the iteration; the marker's own length is `device_s` when the markers
    are the device's. A trace knows nothing of compiles: `compile_s` is unknown (null)."""
    if device_steps.empty:
        return pd.DataFrame()
    lane = device_steps["device"].iloc[0]
    s = device_steps[device_steps["device"] == lane].sort_values("start_s").reset_index(drop=True)
    on_device = bool((s["source"] == "device").all())
    start = s["start_s"].to_numpy(dtype=float)
    end = np.append(start[1:], s["end_s"].to_numpy(dtype=float)[-1:])
    end = np.maximum(end, start)
    return pd.DataFrame({
        "step": range(len(s)), "step_num": s["step_num"], "start_time_s": start, "end_time_s": end, "duration_s": end - start,
        "device_s": s["duration_s"].astype(float) if on_device else np.nan, "compiled": False, "compile_s": np.nan,
        "traced": True, "instrumented": False, "tail": np.arange(len(s)) == len(s) - 1,
        "source": "annotation:device-trace" if on_device else "annotation:trace",
    })


def import_manifest(path: Path | str, tables: Any, *, name: str | None, started: float, argv: list[str], cwd: str) -> dict[str, Any]:
    """The first run.json of an imported run (or of one host's shard of an imported job)."""
    return {
        "name": name or Path(path).name.split(".")[0] or "imported",
        "status": "running", "exit_code": None, "command": ["tpu-perf", "import", str(path)], "argv": argv, "cwd": cwd,
        "started_at": started, "pid": os.getpid(), "host": layout.hostname(), "frameworks": ["pytorch"] if tables.format == "kineto" else ["xla"],
        "hardware": hardware(tables), "imported": {"from": str(Path(path).resolve()), "format": tables.format, "files": list(tables.files), "hostnames": list(tables.hostnames)},
        "config": {}, "tags": {},
    }
