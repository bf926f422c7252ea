"""What a corpus script knows of itself, written where the test asks ($CORPUS_TRUTH), as JSON.

iterations: loop iterations (micro-batches); updates: optimizer updates (the steps tpu-perf must
count); micro_batches: per update; step_s: median wall time of one update, timed by the script;
flops: FLOPs of one update (XLA's cost analysis or FlopCounterMode, of the same computation).
"""

import json
import os
import statistics
import time


class Clock:
    """Wall time of each update, measured from one update's end to the next's."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.times: list[float] = []

    def tick(self) -> None:
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now

    def median(self, skip: int = 3) -> float:
        return statistics.median(self.times[skip:])


def write(**facts: object) -> None:
    path = os.environ.get("CORPUS_TRUTH")
    if path:
        with open(path, "w") as f:
            json.dump(facts, f)
    print("truth:", json.dumps(facts))
