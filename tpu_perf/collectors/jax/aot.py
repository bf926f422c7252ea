"""Compiles the recorded step for TPU slices that are not attached (`record --topology v6e:2x2`).

With a libtpu that matches jax (`jax[tpu]`), `jax.experimental.topologies.get_topology_desc` gives
compile-only devices for a named slice on any machine. After the script ends, the step function is
lowered again from the abstract arguments of its last compile, with every sharding moved from the
devices the script ran on to the slice's devices (same mesh shape, axis names and axis types, laid
out as `jax.make_mesh` would lay them on that slice), and compiled by the TPU compiler. Its cost and
memory analyses and the optimized HLO are raw data written to the run (`aot/<topology>.json`,
`hlo/aot-<topology>.hlo.txt`); `tpu_perf.analyzers.aot` turns them into the report's `aot` section.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable
from typing import Any

from tpu_perf.collectors.jax import at_peak
from tpu_perf.collectors.jax.jit import FunctionState
from tpu_perf.errors import UsageError
from tpu_perf.store import layout

_TOPOLOGY = re.compile(r"^(?P<chip>[A-Za-z0-9 ]+):(?P<dims>\d+(x\d+)*)$")

MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes")


class AotError(RuntimeError):
    """A topology compile that cannot be done; the message is one line saying what to change."""


def parse_topology(text: str) -> str:
    """Check a `--topology` value (`v6e:2x2`, `v5p:2x2x1`) before anything runs; returns it."""
    name = text.strip()
    match = _TOPOLOGY.match(name)
    if not match:
        raise UsageError(f"--topology {text!r}: expected CHIP:SHAPE such as v6e:2x2, v5e:2x4 or v5p:2x2x1")
    from tpu_perf.hardware import lookup_chip
    from tpu_perf.hardware.chips import unknown_chip_message

    chip = lookup_chip(match["chip"])
    if chip is None or not chip.name.startswith("tpu"):
        what = unknown_chip_message("--topology", match["chip"]) if chip is None else f"--topology {match['chip']!r}: {chip.name} is not a TPU"
        raise UsageError(f"{what}; a topology is a TPU slice such as v6e:2x2, v5e:2x4 or v5p:2x2x1 (checked before the script runs)")
    if any(int(d) == 0 for d in match["dims"].split("x")):
        raise UsageError(f"--topology {text!r}: a slice has at least one chip along each axis")
    return name


def topology_chips(name: str) -> int:
    """Chips in a slice name: the product of its shape (`v5p:2x2x1` -> 4)."""
    return math.prod(int(d) for d in name.rsplit(":", 1)[1].split("x"))


def _slice_devices(name: str, jax: Any) -> list[Any]:
    from jax.experimental import topologies

    # libtpu takes a host-wide lock file when it starts; a compile-only client needs no TPU, so it
    # must not fail because another process (a torch-tpu job, a second recording) holds the lock.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        return list(topologies.get_topology_desc(name, platform="tpu").devices)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AotError(f"--topology {name}: the TPU compiler cannot describe this slice ({first}); it needs jax's own libtpu (pip install 'tpu-perf[tpu]', see `tpu-perf doctor`)") from None


class ShardingMap:
    """Moves shardings from the script's devices to a slice's, keeping mesh shapes and axis names."""

    def __init__(self, name: str, local: list[Any], targets: list[Any], jax: Any) -> None:
        if len(local) != len(targets):
            platform = local[0].platform if local else "?"
            raise AotError(
                f"--topology {name}: the slice has {len(targets)} devices but the script ran on {len(local)} {platform} device(s); "
                f"run it with as many, e.g. XLA_FLAGS=--xla_force_host_platform_device_count={len(targets)} on a CPU machine"
            )
        self.name = name
        self.jax = jax
        self.by_id = {d.id: t for d, t in zip(sorted(local, key=lambda d: d.id), targets, strict=True)}
        self.meshes: dict[int, Any] = {}
        self.targets = targets

    def mesh(self, mesh: Any) -> Any:
        """The same shape and axis names over the slice, laid out as `jax.make_mesh` lays them
        there (`mesh_utils.create_device_mesh`: neighbours on the torus); by position otherwise."""
        import numpy as np
        from jax.experimental import mesh_utils
        from jax.sharding import Mesh

        if id(mesh) not in self.meshes:
            shape = mesh.devices.shape
            try:
                devices = mesh_utils.create_device_mesh(shape, self.targets)
            except Exception:  # a mesh over part of the devices, or a shape the slice cannot lay out
                devices = np.array([self.by_id[d.id] for d in mesh.devices.flat], dtype=object).reshape(shape)
            self.meshes[id(mesh)] = Mesh(devices, mesh.axis_names, axis_types=getattr(mesh, "axis_types", None))
        return self.meshes[id(mesh)]

    def sharding(self, sharding: Any) -> Any:
        from jax.sharding import NamedSharding, SingleDeviceSharding

        if isinstance(sharding, NamedSharding):
            return NamedSharding(self.mesh(sharding.mesh), sharding.spec)
        if isinstance(sharding, SingleDeviceSharding):
            return SingleDeviceSharding(self.by_id[next(iter(sharding.device_set)).id])
        raise AotError(f"--topology {self.name}: a {type(sharding).__name__} cannot be moved to the slice; shard the step's arguments with NamedSharding")

    def is_sharding(self, x: Any) -> bool:
        return isinstance(x, self.jax.sharding.Sharding)

    def tree(self, tree: Any) -> Any:
        """Shardings and ShapeDtypeStructs in `tree` moved to the slice; other leaves kept."""
        jax = self.jax

        def move(x: Any) -> Any:
            if isinstance(x, jax.ShapeDtypeStruct):
                s = x.sharding
                return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.sharding(s) if s is not None else None, weak_type=x.weak_type)
            return self.sharding(x) if self.is_sharding(x) else x

        return jax.tree_util.tree_map(move, tree, is_leaf=self.is_sharding)


def _place_unsharded(args: Any, targets: list[Any], jax: Any) -> Any:
    """Arguments that carry no sharding at all (numpy inputs) go to the slice's first device, as
    they would go to the default device on the slice; otherwise they would compile for the CPU."""
    from jax.sharding import SingleDeviceSharding

    leaves = [x for x in jax.tree_util.tree_leaves(args) if isinstance(x, jax.ShapeDtypeStruct)]
    if any(x.sharding is not None for x in leaves):
        return args
    first = SingleDeviceSharding(targets[0])
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=first, weak_type=x.weak_type) if isinstance(x, jax.ShapeDtypeStruct) else x, args)


def _cost(compiled: Any) -> dict[str, float]:
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return {k: float(v) for k, v in (cost or {}).items()}


def compile_for_topology(state: FunctionState, name: str, *, jit: Callable[..., Any], jax: Any, writer: Any = None, warn: Callable[[str], None] = lambda message: None) -> tuple[dict[str, Any], str]:
    """(raw facts, optimized HLO text) of `state`'s step compiled for slice `name`."""
    if state.kind == "pmap":
        raise AotError(f"--topology {name}: a jax.pmap step maps over this machine's devices and cannot be compiled for a slice; write it with jax.jit and shardings")
    targets = _slice_devices(name, jax)
    moves = ShardingMap(name, list(jax.devices()), targets, jax)
    args, kwargs = state.abstract_args or ((), {})
    args, kwargs = _place_unsharded(moves.tree((args, kwargs)), targets, jax)
    options = moves.tree(state.jit_kwargs)
    fn = jit(state.fun, **options) if state.fun is not None else state.jitted
    meshes = list(moves.meshes.values())
    t0 = time.perf_counter()
    compiled, oom = None, None
    with at_peak.dump_options() as (dump, dump_options), contextlib.ExitStack() as context:
        if meshes:  # a bare PartitionSpec inside the step resolves against the context mesh
            context.enter_context(meshes[0])
        try:
            lowered = fn.lower(*args, **kwargs)
            compiled = lowered.compile(compiler_options=dump_options)
        except Exception as exc:
            oom = at_peak.out_of_memory(exc)  # it does not fit: XLA's dump still says what filled HBM
            if oom is None or writer is None:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise AotError(f"--topology {name}: the step did not compile for the slice ({type(exc).__name__}: {first})") from None
            warn(f"--topology {name}: the step does not fit the slice's memory ({oom}); see aot.at_peak for what fills it")
        seconds = time.perf_counter() - t0
        if writer is not None:  # XLA's liveness at the peak on the slice, for `aot.at_peak`
            at_peak.save(dump, layout.aot_hlo(name).removesuffix(".hlo.txt"), state.fun or state.jitted, (args, kwargs), lowered, writer=writer, jax=jax, warn=warn)
        text = compiled.as_text() if compiled is not None else at_peak.dumped_hlo(dump)
    memory = compiled.memory_analysis() if compiled is not None else None
    raw = {
        "topology": name,
        "function": state.name,
        "device_kind": targets[0].device_kind,
        "devices": len(targets),
        "chips": topology_chips(name),
        "meshes": [{"axis_names": list(m.axis_names), "shape": list(m.devices.shape)} for m in meshes],
        "cost": dict(sorted(_cost(compiled).items())) if compiled is not None else {},
        "memory": {f: (int(v) if (v := getattr(memory, f, None)) is not None else None) for f in MEMORY_FIELDS},
        "compile_s": seconds,
        "out_of_memory": oom,
    }
    return raw, text or ""


def record_topologies(state: FunctionState | None, names: tuple[str, ...], *, jit: Callable[..., Any], jax: Any, writer: Any, warn: Callable[[str], None], log: Callable[[str], None]) -> None:
    """Compile the step for each slice and write `aot/<stem>.json` and its HLO; failures warn."""
    if not names:
        return
    if state is None or state.abstract_args is None:
        message = "--topology: no step function was found to compile (mark steps with tpu_perf.step() around a jitted step)"
        warn(message)
        log(f"tpu-perf: error: {message}")
        return
    from tpu_perf import jsonio

    for name in names:
        try:
            raw, hlo = compile_for_topology(state, name, jit=jit, jax=jax, writer=writer, warn=warn)
        except AotError as exc:
            warn(str(exc))
            log(f"tpu-perf: error: {exc}")
            continue
        raw["hlo_file"] = layout.aot_hlo(name)
        writer.write_text(raw["hlo_file"], hlo)
        writer.write_text(layout.aot_json(name), jsonio.dumps(raw, indent=2) + "\n")
