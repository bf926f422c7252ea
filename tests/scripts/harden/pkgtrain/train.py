"""`python -m pkgtrain.train STEPS OUT`: writes sys.argv[0] and the steps it ran."""

import json
import sys

from pkgtrain import init, train_step


def main() -> None:
    steps, out = int(sys.argv[1]), sys.argv[2]
    w, x = init()
    for _ in range(steps):
        w = train_step(w, x)
    w.block_until_ready()
    json.dump({"iterations": steps, "argv0": sys.argv[0]}, open(out, "w"))


if __name__ == "__main__":
    main()
