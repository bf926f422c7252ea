"""The git state of a folder: what a run's manifest and a saved baseline record of the code that made them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any


def git_state(path: Path) -> dict[str, Any] | None:
    """sha, dirty flag and root of the git repository holding `path`, or None outside one."""
    folder = path if path.is_dir() else path.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10, check=True).stdout.strip()

    try:
        root = git("rev-parse", "--show-toplevel")
        sha = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": sha, "dirty": dirty, "root": root}
