"""Compiles an adam MLP step for a v5e:2x2 slice with tpu-perf's topology compile, from abstract shapes.

The model (--width, --layers, float32) is never allocated: its arguments are ShapeDtypeStructs, so
a step that needs more than a chip's 16 GiB can be compiled on a small machine. `--shard` shards
the parameters and adam's state over the slice's 4 chips (FSDP-style) instead of keeping them
whole on one chip. Prints the report's `aot` section as JSON. Needs 4 host devices:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 python tests/memory_scripts/aot_fit.py --shard
"""

import argparse
import functools
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

sys.path.insert(0, str(Path(__file__).parent))
import adam_mlp  # noqa: E402

from tpu_perf.analyzers.aot import analyze_aot  # noqa: E402
from tpu_perf.collectors.jax.aot import record_topologies  # noqa: E402
from tpu_perf.collectors.jax.jit import FunctionState  # noqa: E402
from tpu_perf.jsonio import dumps, to_jsonable  # noqa: E402
from tpu_perf.store import RunWriter, load_run  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--shard", action="store_true")
    parser.add_argument("--topology", default="v5e:2x2")
    args = parser.parse_args()
    optimizer = optax.adam(1e-3)

    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(adam_mlp.loss_fn)(params, x, y, False)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    one = SingleDeviceSharding(jax.devices()[0])

    def place(x):  # 2-D arrays sharded over the chips by rows with --shard; everything else whole
        spec = PartitionSpec("data") if (args.shard and x.ndim == 2) else PartitionSpec()
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, spec) if args.shard else one)

    params = jax.eval_shape(lambda: adam_mlp.init_params(jax.random.PRNGKey(0), [128] + [args.width] * args.layers + [10]))
    state = jax.eval_shape(optimizer.init, params)
    batch = (jax.ShapeDtypeStruct((args.batch, 128), jnp.float32), jax.ShapeDtypeStruct((args.batch,), jnp.int32))
    abstract = tuple(jax.tree_util.tree_map(place, t) for t in (params, state, *batch))
    jit = functools.partial(jax.jit, donate_argnums=(0, 1))
    fn = FunctionState(name="train_step", jitted=jit(train_step), fun=train_step, jit_kwargs={"donate_argnums": (0, 1)}, abstract_args=(abstract, {}))
    with tempfile.TemporaryDirectory(prefix="aot-fit-") as store:  # a scratch store: only the printed analysis is kept
        writer = RunWriter.create(store, {"name": "aot-fit", "status": "running", "config": {"topologies": [args.topology]}})
        record_topologies(fn, (args.topology,), jit=jax.jit, jax=jax, writer=writer, warn=lambda m: print(m, file=sys.stderr), log=lambda m: None)
        writer.finish("completed", 0)
        (aot,) = analyze_aot(load_run(writer.url))
    print(dumps(to_jsonable(aot), indent=None))


if __name__ == "__main__":
    main()
