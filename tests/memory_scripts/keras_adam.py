"""A Keras 3 MLP (JAX backend) trained with `model.fit` and Adam: Keras's own jitted train step takes
its state as a bare tuple of variable lists (trainable, non-trainable, optimizer, metrics).
Writes the bytes of the trainable variables and of the optimizer's to OUT_JSON.

Usage: keras_adam.py OUT_JSON
"""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
import keras  # noqa: E402
import numpy as np  # noqa: E402

model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x, y = np.random.rand(128, 64).astype("float32"), np.random.randint(0, 10, 128)
model.fit(x, y, batch_size=32, epochs=1, verbose=0)
with open(sys.argv[1], "w") as f:
    json.dump({"param_bytes": sum(v.numpy().nbytes for v in model.trainable_variables), "opt_bytes": sum(v.numpy().nbytes for v in model.optimizer.variables), "batch_bytes": 32 * 64 * 4 + 32 * 8}, f)
