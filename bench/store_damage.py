"""Damaged runs against the reading commands: the before/after numbers of issue 29.

Every case of tests/damage.py is applied to a copy of RUN_FOLDER in a store of its own, beside an
untouched copy. Then, in this process through the console entry point, `ls --json`, `ls` (table),
`report`, `advise` and `report --json` of the damaged copy, and the dashboard's runs page (AppTest).
Counted: tracebacks; one-line errors (exit 2/3, one stderr line); exit 0; damaged runs read as fine
(silently wrong); stores where `ls` or the runs page lost the healthy run or crashed.

Run with the tpu-perf to measure first on PYTHONPATH (this checkout, or another's for "before"):
  PYTHONPATH=$PWD python bench/store_damage.py RUN_FOLDER WORK_DIR [--no-dashboard]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from damage import DAMAGING, LISTED  # noqa: E402

from tpu_perf.cli import main  # noqa: E402

HEALTHY, CASE = "20300101-000000-00000a", "20300102-000000-000001"


def invoke(*args: str) -> tuple[int | None, BaseException | None, str, str]:
    out, err, code, crash = io.StringIO(), io.StringIO(), 0, None
    sys.argv = ["tpu-perf", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0
        except BaseException as exc:  # noqa: BLE001 - counted
            crash = exc
    return code, crash, out.getvalue(), err.getvalue()


def build(source: Path, work: Path) -> dict[Path, str]:
    stores = {}
    for i, (name, damage) in enumerate({**DAMAGING, **LISTED}.items()):
        store = work / f"s{i:02d}"
        for run_id in (HEALTHY, CASE):
            shutil.copytree(source, store / run_id)
            manifest = json.loads((store / run_id / "run.json").read_text())
            (store / run_id / "run.json").write_text(json.dumps({**manifest, "id": run_id}))
        damage(store / CASE)
        stores[store] = name
    return stores


def main_() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--no-dashboard", action="store_true")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    stores = build(args.run, args.work)
    os.environ["COLUMNS"] = "400"
    counts = {"traceback": 0, "one line": 0, "exit 0": 0, "silently wrong": 0, "ls lost the healthy run": 0, "ls table crashed": 0, "runs page broken": 0}
    for store, name in stores.items():
        code, crash, out, _ = invoke("ls", "--json", "--store", str(store))
        counts["ls lost the healthy run"] += bool(crash or code or HEALTHY not in out)
        counts["ls table crashed"] += invoke("ls", "--store", str(store))[1] is not None
        for command in (("report",), ("advise",), ("report", "--json")):
            code, crash, out, err = invoke(*command, "--store", str(store), CASE)
            if crash is not None:
                counts["traceback"] += 1
            elif code in (2, 3) and len([line for line in err.splitlines() if line.strip()]) == 1:
                counts["one line"] += 1
            elif code == 0:
                counts["exit 0"] += 1
                counts["silently wrong"] += name in DAMAGING
    if not args.no_dashboard:
        logging.disable(logging.WARNING)
        from streamlit.testing.v1 import AppTest

        for store in stores:
            os.environ["TPU_PERF_STORE"], os.environ["TPU_PERF_CACHE_DIR"] = str(store), str(args.work / "cache")
            at = AppTest.from_string("from tpu_perf.dashboard.screens import runs\nruns.render()\n", default_timeout=120).run()
            counts["runs page broken"] += bool(at.exception) or not at.dataframe or HEALTHY not in set(at.dataframe[0].value["id"])
    print(f"{len(stores)} cases ({len(DAMAGING)} damaging, {len(LISTED)} loadable), {3 * len(stores)} report/advise calls:")
    print(", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main_()
