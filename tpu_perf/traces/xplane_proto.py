"""The XSpace protobuf schema (`*.xplane.pb`), built at run time from its field list.

No `xplane_pb2` ships with jax, jaxlib or xprof, so the message classes are made here from the
field numbers of tsl/profiler/protobuf/xplane.proto (stable since 2020). With them the upb parser
reads a whole file in C, and tables are built from metadata ids (a few thousand distinct names)
instead of one Python string per event.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_INT64, _UINT64, _DOUBLE, _STRING, _BYTES, _MESSAGE = 3, 4, 1, 9, 12, 11
_OPT, _REP = 1, 3

# message -> [(field name, number, type, label, message type or None, oneof index or None)]
_FIELDS: dict[str, list[tuple[str, int, int, int, str | None, int | None]]] = {
    "XSpace": [("planes", 1, _MESSAGE, _REP, "XPlane", None), ("errors", 2, _STRING, _REP, None, None),
               ("warnings", 3, _STRING, _REP, None, None), ("hostnames", 4, _STRING, _REP, None, None)],
    "XPlane": [("id", 1, _INT64, _OPT, None, None), ("name", 2, _STRING, _OPT, None, None), ("lines", 3, _MESSAGE, _REP, "XLine", None),
               ("event_metadata", 4, _MESSAGE, _REP, "XPlane.EventMetadataEntry", None),
               ("stat_metadata", 5, _MESSAGE, _REP, "XPlane.StatMetadataEntry", None), ("stats", 6, _MESSAGE, _REP, "XStat", None)],
    "XLine": [("id", 1, _INT64, _OPT, None, None), ("display_id", 10, _INT64, _OPT, None, None), ("name", 2, _STRING, _OPT, None, None),
              ("display_name", 11, _STRING, _OPT, None, None), ("timestamp_ns", 3, _INT64, _OPT, None, None),
              ("duration_ps", 9, _INT64, _OPT, None, None), ("events", 4, _MESSAGE, _REP, "XEvent", None)],
    "XLineEvents": [("timestamp_ns", 3, _INT64, _OPT, None, None), ("events", 4, _BYTES, _REP, None, None)],
    "XEvent": [("metadata_id", 1, _INT64, _OPT, None, None), ("offset_ps", 2, _INT64, _OPT, None, 0), ("num_occurrences", 5, _INT64, _OPT, None, 0),
               ("duration_ps", 3, _INT64, _OPT, None, None), ("stats", 4, _MESSAGE, _REP, "XStat", None)],
    "XStat": [("metadata_id", 1, _INT64, _OPT, None, None), ("double_value", 2, _DOUBLE, _OPT, None, 0), ("uint64_value", 3, _UINT64, _OPT, None, 0),
              ("int64_value", 4, _INT64, _OPT, None, 0), ("str_value", 5, _STRING, _OPT, None, 0), ("bytes_value", 6, _BYTES, _OPT, None, 0),
              ("ref_value", 7, _UINT64, _OPT, None, 0)],
    "XEventMetadata": [("id", 1, _INT64, _OPT, None, None), ("name", 2, _STRING, _OPT, None, None), ("display_name", 4, _STRING, _OPT, None, None),
                       ("metadata", 3, _BYTES, _OPT, None, None), ("stats", 5, _MESSAGE, _REP, "XStat", None), ("child_id", 6, _INT64, _REP, None, None)],
    "XStatMetadata": [("id", 1, _INT64, _OPT, None, None), ("name", 2, _STRING, _OPT, None, None), ("description", 3, _STRING, _OPT, None, None)],
}
_ONEOFS = {"XEvent": ["data"], "XStat": ["value"]}
_MAPS = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}
_PACKAGE = "tpu_perf.xplane"


def _add_fields(msg: Any, fields: list[tuple[str, int, int, int, str | None, int | None]]) -> None:
    for name, number, ftype, label, type_name, oneof in fields:
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof


@cache
def messages() -> dict[str, Any]:
    """Message classes by name (`XSpace`, `XPlane`, `XLine`, `XEvent`, `XStat`, ...), made once.

    `XLineEvents` reads an XLine with its events left as bytes (upb splits them in C; the reader
    decodes their fields as numpy columns, with no message object per event)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="tpu_perf_xplane.proto", package=_PACKAGE, syntax="proto3")
    for name, fields in _FIELDS.items():
        msg = fdp.message_type.add(name=name)
        for oneof in _ONEOFS.get(name, []):
            msg.oneof_decl.add(name=oneof)
        _add_fields(msg, fields)
        if name == "XPlane":
            for entry, value in _MAPS.items():
                nested = msg.nested_type.add(name=entry)
                nested.options.map_entry = True
                _add_fields(nested, [("key", 1, _INT64, _OPT, None, None), ("value", 2, _MESSAGE, _OPT, value, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}")) for name in _FIELDS}


def parse_xspace(data: bytes) -> Any:
    """An XSpace message from the bytes of one `.xplane.pb` (raises protobuf's DecodeError on bad bytes)."""
    space = messages()["XSpace"]()
    space.ParseFromString(data)
    return space


def stat_value(stat: Any) -> Any:
    """The value an XStat holds, whichever oneof field is set (`ref_value` stays the id it refers to)."""
    kind = stat.WhichOneof("value")
    return None if kind is None else getattr(stat, kind)
