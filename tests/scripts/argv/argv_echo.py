"""Writes the arguments it was given (sys.argv[1:]) as JSON to $ECHO_OUT: `record` must pass them unchanged."""

import json
import os
import sys

with open(os.environ["ECHO_OUT"], "w") as f:
    json.dump({"argv0": sys.argv[0], "args": sys.argv[1:], "name": __name__}, f)
