"""Arguments belong to the script (issue 24): `record`'s option parsing stops at SCRIPT, or right
after `-m MODULE`, as in `python` and `torchrun`; every later token is the script's, unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, tpu_perf_cli
from tpu_perf.cli import record as record_fn  # noqa: F401  (the command must import)
from tpu_perf.commands.script_args import split_at_script

ECHO = ROOT / "tests" / "scripts" / "argv"


def _record_params() -> list:
    import typer

    from tpu_perf.cli import app

    return list(typer.main.get_command(app).commands["record"].params)


def _every_option() -> list[str]:
    """Every option name `record` has, each followed by a value if it takes one."""
    tokens: list[str] = []
    for p in _record_params():
        if p.param_type_name != "option":
            continue
        for opt in [*p.opts, *p.secondary_opts]:
            tokens += [opt] if (p.is_flag or p.count) else [opt, "v5e" if opt == "--chip" else "3"]
    return tokens


def test_split_stops_at_script_and_after_module() -> None:
    params = _record_params()
    assert split_at_script(["-q", "--store", "s", "train.py", "--name", "x"], params) == ["-q", "--store", "s", "--", "train.py", "--name", "x"]
    assert split_at_script(["--store=s", "-m", "pkg.train", "--module", "bar", "--steps", "3"], params) == ["--store=s", "-m", "pkg.train", "--", "--module", "bar", "--steps", "3"]
    assert split_at_script(["-qmpkg.train", "-q"], params) == ["-qmpkg.train", "--", "-q"]
    assert split_at_script(["--module=pkg", "--name", "foo"], params) == ["--module=pkg", "--", "--name", "foo"]
    assert split_at_script(["-q", "--", "train.py", "-m", "x"], params) == ["-q", "--", "train.py", "-m", "x"]


@pytest.mark.slow
@pytest.mark.parametrize("form", ["script", "module"])
def test_every_record_option_reaches_the_script(tmp_path: Path, form: str) -> None:
    passed = ["--name", "foo", "--module", "bar", "--steps", "3", *_every_option(), "-m", "x", "--", "--help", "tail"]
    out = tmp_path / "argv.json"
    target = ["argv_echo.py"] if form == "script" else ["-m", "argv_echo"]
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path / "runs"), *target, *passed, cwd=ECHO, env={"ECHO_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    echoed = json.loads(out.read_text())
    assert echoed["args"] == passed
    assert echoed["name"] == "__main__"
    assert echoed["argv0"].endswith("argv_echo.py")
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1  # --repeat went to the script, not to record
    manifest = json.loads((runs[0] / "run.json").read_text())
    assert manifest["name"] == "argv_echo"  # --name foo was the script's


@pytest.mark.slow
def test_the_module_arguments_of_the_issue(tmp_path: Path) -> None:
    """`record -m MODULE --name foo --module bar --steps 3` hands all six arguments to the module."""
    out = tmp_path / "argv.json"
    proc = tpu_perf_cli("record", "-q", "--no-trace", "--store", str(tmp_path / "runs"), "-m", "argv_echo", "--name", "foo", "--module", "bar", "--steps", "3", cwd=ECHO, env={"ECHO_OUT": str(out)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["args"] == ["--name", "foo", "--module", "bar", "--steps", "3"]


@pytest.mark.slow
def test_an_unknown_option_before_the_script_is_an_error(tmp_path: Path) -> None:
    proc = tpu_perf_cli("record", "--no-such-option", "argv_echo.py", "--store", str(tmp_path / "runs"), cwd=ECHO)
    assert proc.returncode == 2
    assert "no-such-option" in proc.stderr
    assert not (tmp_path / "runs").exists()
