"""A cheap stamp of a local store: what changes when any run in it changes.

Listing a store (`data.list_refs`) opens every run's manifest and checks its tables' footers
(robust-store's rules): about 2.5 ms a run, 0.25 s for 100 runs, paid by every rerun of every page
(a tab opened, an axis changed, a run added to a comparison). The stamp is each run folder's
entries with their modification and change times (chmod changes the latter), and those of a job's
`hosts/` shards: the files `Run.modified_stamp` looks at. The same stamp means the same listing.
"""

from __future__ import annotations

import os

from tpu_perf.store.fs import filesystem, is_local

Stamp = tuple[tuple[str, int], ...]


def _times(path: str, depth: int) -> int:
    """The newest modification or change time (ns) of `path` and its entries, into `hosts/` shards."""
    newest = 0
    with os.scandir(path) as entries:
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            newest = max(newest, info.st_mtime_ns, info.st_ctime_ns)
            if depth and entry.is_dir(follow_symlinks=False) and (entry.name == "hosts" or depth == 1):
                newest = max(newest, _times(entry.path, depth - 1))
    info = os.stat(path)
    return max(newest, info.st_mtime_ns, info.st_ctime_ns)


def store_stamp(store: str) -> Stamp | None:
    """(name, newest time) of every entry of a local store; None for a remote or unreadable one
    (then nothing is memoised: listed every time, as before)."""
    try:
        if not is_local(store):
            return None
        _, root = filesystem(store)
        out = []
        with os.scandir(root) as entries:
            for entry in entries:
                is_dir = entry.is_dir(follow_symlinks=False)
                info = entry.stat(follow_symlinks=False)
                out.append((entry.name, _times(entry.path, 2) if is_dir else max(info.st_mtime_ns, info.st_ctime_ns)))
        return tuple(sorted(out))
    except OSError:
        return None
