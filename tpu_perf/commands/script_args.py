"""Where `tpu-perf record`'s own options end: at SCRIPT, or right after `-m MODULE`.

As in `python` and `torchrun`: everything after the script (or the module's name) is the script's,
even an option that `record` also has (`record -m pkg.train --name foo` gives `--name foo` to
the module). A `--` after record's options is kept as it is (it already ends them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MODULE_OPTS = ("-m", "--module")


def _options(params: Sequence[Any]) -> dict[str, bool]:
    """Every option string of `params` -> whether it takes a value."""
    takes: dict[str, bool] = {}
    for p in params:
        if getattr(p, "param_type_name", None) != "option":
            continue
        value = not (getattr(p, "is_flag", False) or getattr(p, "count", False))
        for opt in [*p.opts, *getattr(p, "secondary_opts", [])]:
            takes[opt] = value
    takes.setdefault("--help", False)
    return takes


def split_at_script(args: Sequence[str], params: Sequence[Any]) -> list[str]:
    """`args` with a `--` inserted where record's options end (the script's arguments follow it)."""
    args = list(args)
    takes = _options(params)
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            return args
        if not token.startswith("-") or token == "-":
            return [*args[:i], "--", *args[i:]]  # SCRIPT: it and all after it are the script's
        name, eq, _ = token.partition("=")
        if token.startswith("--"):
            width = 2 if takes.get(name) and not eq else 1
        else:
            width, name = _short(token, takes)
        if name in MODULE_OPTS and i + width <= len(args):
            return [*args[: i + width], "--", *args[i + width :]]
        i += width
    return args


def _short(token: str, takes: dict[str, bool]) -> tuple[int, str]:
    """Tokens a short-option cluster (`-q`, `-qm`, `-mpkg.train`) uses, and the option that takes
    its value (if any)."""
    for k, ch in enumerate(token[1:], start=1):
        opt = "-" + ch
        if takes.get(opt):
            return (1 if k + 1 < len(token) else 2), opt
    return 1, token[:2]
