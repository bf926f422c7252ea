"""The terminal a command writes to, and click's usage errors: shared by the CLI, its commands
and the notebook's `%tpu_perf` magics (which parse their options with the same commands)."""

from __future__ import annotations

from rich.console import Console

out = Console()
err = Console(stderr=True, soft_wrap=True)  # one message, one line: logs and tests grep them


def click_exceptions() -> tuple[type[Exception], ...]:
    """ClickException from typer's bundled click (typer >= 0.29) and from click itself, if present."""
    found: list[type[Exception]] = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(__import__(module, fromlist=["ClickException"]).ClickException)
        except ImportError:
            continue
    return tuple(found)
