"""Where a section's JSON keys come from, in one place: `to_dict` and the published schema
(`analyzers.schema`) both read the same layout, so the document and its schema cannot drift.

A layout maps each JSON key to an attribute path of the typed section (`"value"`, `"model.flops"`)
or to a nested layout (an object of its own). Sections whose JSON is their dataclass as it is need
no layout."""

from __future__ import annotations

from collections.abc import Mapping
from operator import attrgetter
from typing import Any, Union

Layout = Mapping[str, Union[str, "Layout"]]


def reshaped(obj: Any, layout: Layout) -> dict[str, Any]:
    """The JSON-shaped dict of `obj` by `layout` (values as they are: `jsonio.to_jsonable` converts)."""
    return {key: attrgetter(source)(obj) if isinstance(source, str) else reshaped(obj, source) for key, source in layout.items()}
