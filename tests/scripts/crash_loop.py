"""A run that crashes after a few marked steps (`check` must name the crash and its reason)."""

import time

import tpu_perf

for i in range(5):
    tpu_perf.step(i)
    time.sleep(0.002)
raise RuntimeError("out of memory in layer 3")
