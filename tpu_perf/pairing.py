"""Which installed packages must match, read from the packages' own metadata.

jax pins the libtpu its jaxlib was built for in its `tpu` extra (jax 0.10.2: `libtpu==0.0.42.*`);
torch-tpu names the torch and libtpu it needs. A libtpu that jax did not choose makes
`jax.profiler.start_trace` segfault, so the pairing is read, not guessed: from
`importlib.metadata` requirements, optionally from extra folders first (`tpu-perf doctor --site`),
the way a `PYTHONPATH` entry shadows site-packages.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

Dists = dict[str, md.Distribution]


@dataclass(frozen=True, kw_only=True)
class Pairing:
    """One `package -> dependency` constraint and whether the installed versions meet it."""

    package: str
    version: str
    extra: str | None
    """The extra that carries the requirement (`tpu` for jax's libtpu pin), None for a base one."""
    dependency: str
    requirement: str
    """As the package states it, e.g. `libtpu==0.0.42.*`."""
    found: str | None
    """The installed version of `dependency`; None when it is not installed."""
    ok: bool


def distributions(site: Sequence[str] = ()) -> Dists:
    """Installed distributions by canonical name; those under `site` shadow the rest."""
    found: Dists = {}
    for path in [*site, *sys.path]:
        for dist in md.distributions(path=[path]):
            name = dist.metadata["Name"]
            if name:
                found.setdefault(canonicalize_name(name), dist)
    return found


def version(dists: Dists, name: str) -> str | None:
    dist = dists.get(canonicalize_name(name))
    return dist.version if dist is not None else None


def _requirements(dist: md.Distribution, dependency: str, extra: str | None) -> list[Requirement]:
    out = []
    for text in dist.requires or []:
        req = Requirement(text)
        if canonicalize_name(req.name) != canonicalize_name(dependency):
            continue
        in_extra = req.marker is not None and req.marker.evaluate({"extra": extra or ""})
        base = req.marker is None or req.marker.evaluate({"extra": ""})
        if (extra is None and base) or (extra is not None and in_extra and not base):
            out.append(req)
    return out


def pairing(dists: Dists, package: str, dependency: str, extra: str | None = None) -> Pairing | None:
    """The constraint `package` (with `extra`) puts on `dependency`; None when either is absent
    or the package states none."""
    dist = dists.get(canonicalize_name(package))
    if dist is None:
        return None
    reqs = _requirements(dist, dependency, extra)
    if not reqs:
        return None
    found = version(dists, dependency)
    ok = found is not None
    if ok:
        try:
            ok = all(r.specifier.contains(Version(found), prereleases=True) for r in reqs)
        except InvalidVersion:
            ok = False
    spec = ",".join(str(r.specifier) for r in reqs)
    return Pairing(package=package, version=dist.version, extra=extra, dependency=dependency, requirement=f"{dependency}{spec}", found=found, ok=ok)


PAIRS: tuple[tuple[str, str, str | None], ...] = (
    ("jax", "jaxlib", None),
    ("jax", "libtpu", "tpu"),
    ("torch-tpu", "torch", None),
    ("torch-tpu", "libtpu", None),
)
"""(package, dependency, extra) pairs that must match for tracing and TPU compiles to work."""


def pairings(dists: Dists) -> list[Pairing]:
    """Every pair of PAIRS whose dependency is installed (a missing libtpu is a CPU/GPU setup)."""
    out = []
    for package, dependency, extra in PAIRS:
        p = pairing(dists, package, dependency, extra)
        if p is not None and (p.found is not None or dependency != "libtpu"):
            out.append(p)
    return out


def jax_libtpu_mismatch(dists: Dists | None = None) -> Pairing | None:
    """jax's libtpu pin when the installed libtpu breaks it, else None."""
    p = pairing(distributions() if dists is None else dists, "jax", "libtpu", "tpu")
    return p if (p is not None and p.found is not None and not p.ok) else None
