"""A framework-free step whose cost is set from the command line, marked with `tpu_perf.step()`:
the `tpu-perf check` tests' runs where the gate's statistics, not a framework, are the subject.

Usage: gate_loop.py [--steps N] [--work K]   (K may be fractional: a machine factor times a work)
Each step waits K x 0.2 ms (twice K is twice the step). A wait, not arithmetic: on a loaded shared
machine a busy step's time is the scheduler's, and the tests need known ratios. The process starts
in about a second (no JAX to import or compile).
"""

import argparse
import time

import tpu_perf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--work", type=float, default=10)
args = parser.parse_args()

UNIT_S = 0.0002
"""Seconds a step waits per unit of work."""

for i in range(args.steps):
    tpu_perf.step(i)
    time.sleep(args.work * UNIT_S)
print("done")
