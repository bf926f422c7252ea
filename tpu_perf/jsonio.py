"""The one JSON boundary: every document tpu-perf prints or saves goes through `dumps`.

Why one place: NaN and infinities are not JSON (Python writes them anyway unless told not to), and
numpy scalars, dataclasses and tuples each need a rule. Five hand-written sanitizers drift apart;
this one turns an unknown number into `null`, always, and refuses anything it cannot represent.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any


def to_jsonable(value: Any) -> Any:
    """`value` as plain JSON types: dataclasses become dicts, NaN/inf become None, numpy unwrapped."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        if callable(to_dict):
            return to_jsonable(to_dict())
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, PurePath):
        return str(value)
    item = getattr(value, "item", None)  # numpy / pandas scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return to_jsonable(item())
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return to_jsonable(tolist())
    if _is_missing(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON-serializable")


def _is_missing(value: Any) -> bool:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a core dependency
        return False
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def dumps(value: Any, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """JSON text of `value` through `to_jsonable`; never emits NaN, Infinity or a Python repr."""
    return json.dumps(to_jsonable(value), indent=indent, sort_keys=sort_keys, allow_nan=False)
