"""Compiles a test script's step for a TPU slice directly, the way jax documents it, with none of
tpu-perf's code: `python direct_compile.py SCRIPT.py TOPOLOGY` prints the numbers as JSON."""

import importlib.util
import json
import os
import sys

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402


def load(path):
    spec = importlib.util.spec_from_file_location("script_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(path, topology):
    script = load(path)
    topo = topologies.get_topology_desc(topology, platform="tpu")
    mesh = script.make_mesh(topo.devices)
    is_spec = lambda s: isinstance(s, tuple) and len(s) == 3 and isinstance(s[2], PartitionSpec)  # noqa: E731
    args = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s[0], s[1], sharding=NamedSharding(mesh, s[2])), script.inputs(), is_leaf=is_spec)
    with mesh:
        compiled = jax.jit(script.step, **script.jit_kwargs(mesh)).lower(*args).compile()
    cost = compiled.cost_analysis()
    print(json.dumps({"flops": cost["flops"], "optimal_seconds": cost.get("optimal_seconds"), "bytes_accessed": cost["bytes accessed"], "peak_memory_in_bytes": compiled.memory_analysis().peak_memory_in_bytes, "devices": len(topo.devices)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
