"""What a corpus script knows of itself, written where the test asks ($CORPUS_TRUTH), as JSON.

iterations: loop iterations (micro-batches); updates: optimizer updates (the steps tpu-perf must
count); micro_batches: per update; times: wall time of each update, timed by the script from one
update's end to the next (the first from the loop's start); flops: FLOPs of one update (XLA's cost
analysis or FlopCounterMode, of the same computation).
"""

import json
import os
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


def write(**facts: object) -> None:
    path = os.environ.get("CORPUS_TRUTH")
    if path:
        with open(path, "w") as f:
            json.dump(facts, f)
    print("truth:", json.dumps(facts))
