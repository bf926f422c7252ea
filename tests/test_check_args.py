"""Command-line plumbing of `check` and `record --repeat`: several selectors per flag, child argv."""

from __future__ import annotations

import pytest

from tpu_perf.commands.check import spread_sides
from tpu_perf.commands.repeat import child_args
from tpu_perf.errors import UsageError


def test_side_flags_take_every_selector_up_to_the_next_option() -> None:
    args = ["--baseline", "a", "tag:x=1", "--candidate", "file:b.json", "c", "--margin", "0.05", "--json"]
    assert spread_sides(args) == ["--baseline", "a", "--baseline", "tag:x=1", "--candidate", "file:b.json", "--candidate", "c", "--margin", "0.05", "--json"]
    assert spread_sides(["--baseline=a", "--candidate", "b"]) == ["--baseline=a", "--candidate", "b"]


def test_repeat_child_keeps_every_option_but_repeat_and_adds_the_group_tag() -> None:
    argv = ["record", "--store", "s", "--repeat", "5", "--tag", "side=base", "train.py", "--repeat", "3"]
    assert child_args(argv, ["--repeat", "3"], "G") == ["record", "--tag", "repeat=G", "--store", "s", "--tag", "side=base", "train.py", "--repeat", "3"]
    assert child_args(["record", "--repeat=2", "-m", "pkg.train", "--lr", "1"], ["--lr", "1"], "G") == ["record", "--tag", "repeat=G", "-m", "pkg.train", "--lr", "1"]
    with pytest.raises(UsageError):
        child_args(["report", "x"], [], "G")
