"""Ways to damage a copy of a real run folder, for the fuzz test (tests/test_robust_store.py).

Each case takes the copied run folder and damages it in one way a shared store sees: hand edits,
half copies, another job's umask, disk errors. `DAMAGING` cases make the run damaged (exit 3 from
`report`, `damaged` in `ls`); `LISTED` cases leave a run that loads (user text, missing tables,
a stale heartbeat) and must be shown as it is."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd


def _edit(**fields: object) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / "run.json"
        manifest = json.loads(path.read_text())
        manifest.update(fields)
        path.write_text(json.dumps(manifest))  # json writes NaN and Infinity as Python does

    return apply


def _run_json_folder(folder: Path) -> None:
    (folder / "run.json").unlink()
    (folder / "run.json").mkdir()


def _garbage(name: str, data: bytes) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        (folder / name).write_bytes(data)

    return apply


def _steps(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        path = folder / "steps.parquet"
        change(pd.read_parquet(path)).to_parquet(path, index=False)

    return apply


def _durations(value: float) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame.loc[frame.index[-3:], "duration_s"] = value
        return frame

    return change


def _wrong_schema(frame: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"foo": [1, 2, 3], "bar": ["a", "b", "c"]})


def _text_durations(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(duration_s=frame["duration_s"].astype(str))


def _deep_json(folder: Path) -> None:
    (folder / "run.json").write_text("[" * 100_000 + "]" * 100_000)


DAMAGING: dict[str, Callable[[Path], None]] = {
    "status exploded": _edit(status="exploded"),
    "start 1e308": _edit(started_at=1e308),
    "start NaN": _edit(started_at=math.nan),
    "end Infinity": _edit(ended_at=math.inf),
    "negative start": _edit(started_at=-5.0),
    "name a number": _edit(name=12),
    "tags a list": _edit(tags=["a", "b"]),
    "tag value a dict": _edit(tags={"k": {"x": 1}}),
    "exit_code a string": _edit(exit_code="0"),
    "pid a float": _edit(pid=1.5),
    "error a string": _edit(error="boom"),
    "warnings a string": _edit(warnings="careful"),
    "config a list": _edit(config=[1]),
    "schema_version a string": _edit(schema_version="1"),
    "schema_version 99": _edit(schema_version=99),
    "id missing": lambda f: (f / "run.json").write_text(json.dumps({k: v for k, v in json.loads((f / "run.json").read_text()).items() if k != "id"})),
    "run.json a list": _garbage("run.json", b"[1, 2, 3]"),
    "run.json empty": _garbage("run.json", b""),
    "run.json torn": lambda f: (f / "run.json").write_bytes((f / "run.json").read_bytes()[:200]),
    "run.json binary": _garbage("run.json", os.urandom(512)),
    "run.json deep nesting": _deep_json,
    "run.json a folder": _run_json_folder,
    "steps wrong schema": _steps(_wrong_schema),
    "steps durations as text": _steps(_text_durations),
    "steps negative durations": _steps(_durations(-1.0)),
    "steps durations 1e300": _steps(_durations(1e300)),
    "steps durations infinite": _steps(_durations(math.inf)),
    "steps not parquet": _garbage("steps.parquet", b"PAR1 this is not a parquet file PAR1"),
    "compiles wrong schema": lambda f: pd.DataFrame({"x": [1]}).to_parquet(f / "compiles.parquet"),
    "compiles missing": lambda f: (f / "compiles.parquet").unlink(),
    "steps.parquet a folder": lambda f: ((f / "steps.parquet").unlink(), (f / "steps.parquet").mkdir()),
    "run.json 17 MiB": lambda f: (f / "run.json").write_bytes(b'{"id": "x", "pad": "' + b"a" * (17 << 20) + b'"}'),
    "tables a string": _edit(tables="steps"),
    "steps missing": lambda f: (f / "steps.parquet").unlink(),
}
"""Damage that makes the run unreadable: `report` is one line, exit 3; `ls` lists it as damaged.
Unreadable files (another user's 0600) are tested apart: root reads everything, so that test runs
its commands as `nobody` (tests/test_robust_store.py)."""

USER_TEXT = ("[/]", "[bold]x[/]", "<script>alert(1)</script>", "$(touch /tmp/pwned)", "a|b`c`*d*_e_")
"""Run names, tags and error messages that must appear literally wherever they are shown."""

LISTED: dict[str, Callable[[Path], None]] = {
    **{f"name {text}": _edit(name=text, tags={"note": text}) for text in USER_TEXT},
    "error message markup": _edit(status="failed", exit_code=1, error={"message": "[red]boom[/] <b>x</b>"}),
    "running, heartbeat stale": _edit(status="running", heartbeat_at=1_800_000_000.0 - 10**7, pid=2**22 + 12345, host="elsewhere"),
    "running, heartbeat in the future": _edit(status="running", heartbeat_at=4_000_000_000.0, pid=2**22 + 12345, host="elsewhere"),
    "running, heartbeat null, pid gone": _edit(status="running", heartbeat_at=None, pid=2**22 + 12345),
    "steps NaN durations": _steps(_durations(math.nan)),
    "unknown extra field": _edit(future_field={"anything": [1, 2]}),
}
"""Runs that load: user text shown literally, a dead recorder shown as crashed, NaN steps dropped."""
