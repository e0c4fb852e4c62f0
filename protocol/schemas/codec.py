"""Codecs built from Kafka's message definitions: one decoder and one encoder per (message,
version), each generated once as specialised Python source (:mod:`.compiler`) and executed here
with the runtime helpers below.

Wire types (all big-endian)::

    int8 int16 int32 int64 float64   fixed size; bool one byte (non-zero = true, as Kafka)
    uuid                             16 bytes (KIP-516)
    string                           int16 length + UTF-8, -1 = null
    bytes, records                   int32 length + bytes, -1 = null
    [] (array)                       int32 count + elements, -1 = null
    flexible versions (KIP-482):     strings, bytes, records and arrays use an unsigned varint
                                     of length + 1 (0 = null), and every struct ends with tagged
                                     fields: uvarint count, then (uvarint tag, uvarint size, data)

Field names are the JSON names in snake_case (``TopicData`` -> ``topic_data``). A decoded body is
a :class:`Body` (a dict with attribute access) holding every field the message defines in any
version: the ones absent from this version, or tagged and not sent, have their default (the
JSON ``default``, else 0 / "" / [] / false / the zero uuid, or None when the default is null).
So a handler reads ``body.isolation_level`` on any Fetch version. Encoders take dicts (or
Bodies); a missing field encodes as its default, a field this version lacks is not written.
Tagged fields are written only when they differ from their default; unknown tags are skipped on
decode. A key that names no field of the message (in any version) is refused, so a misspelt
field is a BodyEncodeError rather than a silently sent default.

Decoders take ``(buf, pos, end)`` and return ``(value, new_pos)``; a length or count is checked
against ``end`` before anything is allocated. Errors are :class:`FieldError` with ``offset`` =
index into ``buf``. Encoders take ``(value, out=None)``, append to the bytearray ``out`` (a
fresh one when None: it may hold a header already) and return ``(chunks, total_length)``: a
records field holding a :class:`~protocol.api.FileRegion` (or bytes of 16 KiB or more, passed
through uncopied) is a chunk of its own, so Fetch responses go out by sendfile without copying;
the first chunk is always bytes.
"""

from __future__ import annotations

import functools
import linecache
import operator
import re
import struct
import uuid
from collections.abc import Mapping
from typing import Any, Callable, TypeAlias, cast

from protocol.api import FileRegion
from protocol.schemas import compiler

__all__ = [
    "Body",
    "FieldError",
    "MessageCodec",
    "build_codec",
    "snake_case",
    "version_in",
    "skip_tagged_fields",
]

# What decoders read: a frame or a body in any of these.
ByteBuffer: TypeAlias = bytes | bytearray | memoryview
# What encoders return: bytes, and FileRegions (or large bytes) standing for records fields.
Chunk: TypeAlias = bytes | FileRegion
# A field's decoder; a message's (BodyDecoder) returns a Body.
Decoder: TypeAlias = Callable[[ByteBuffer, int, int], tuple[Any, int]]
BodyDecoder: TypeAlias = Callable[[ByteBuffer, int, int], tuple["Body", int]]
# A message's encoder; a tagged field's (TaggedEncoder) is called without ``out``.
Encoder: TypeAlias = Callable[[Mapping[str, Any], "bytearray | None"], tuple[list[Chunk], int]]
TaggedEncoder: TypeAlias = Callable[[Any], tuple[list[Chunk], int]]
# Makes a field's default value (a fresh one for lists and structs).
DefaultFactory: TypeAlias = Callable[[], object]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ZERO_UUID = uuid.UUID(int=0)


class FieldError(ValueError):
    """Raised by the codecs when a field's length, count or content is invalid (negative, too
    long for what is left, not UTF-8, wrong type); protocol.schemas reports it as
    MalformedFrameError on decode and BodyEncodeError on encode. ``offset`` is the byte index
    of the bad field when decoding."""

    offset: int | None = None


class Body(dict[str, Any]):
    """A decoded struct: a dict whose keys are also attributes (``body.topics``)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@functools.lru_cache(maxsize=None)
def body_class(fields: tuple[str, ...]) -> type[Body]:
    """The Body a decoder builds for a struct of these fields: each field is a property, found
    at once, where Body's ``__getattr__`` runs only after the normal lookup has failed (about
    0.4 µs an access; a handler reads several per partition). A field named like a dict method
    (``items``, ``keys``) stays the method, as on Body: read it by subscript."""
    fields_only = {
        name: property(operator.itemgetter(name)) for name in fields if not hasattr(Body, name)
    }
    return type("Body", (Body,), {"__slots__": (), **fields_only})


def _error(message: str, offset: int) -> FieldError:
    err = FieldError(message)
    err.offset = offset
    return err


def snake_case(name: str) -> str:
    """``TopicData`` -> ``topic_data``, ``ThrottleTimeMs`` -> ``throttle_time_ms``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])|(?<=[A-Z])([A-Z])(?=[a-z])", r"_\1\2", name).lower()


def version_in(spec: str | None, version: int) -> bool:
    """Whether ``version`` is in a JSON version range ("3+", "0-5", "7", "none")."""
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo) <= version <= int(hi)
    return version == int(spec)


# -- varints ---------------------------------------------------------------------------------


def _read_uvarint(buf: ByteBuffer, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _error("truncated unsigned varint", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise _error("unsigned varint longer than 5 bytes", start)


def _write_uvarint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# -- field descriptions ----------------------------------------------------------------------


class _Field:
    """One field of a struct at one version."""

    __slots__ = ("name", "type", "element", "nullable", "tag", "default", "struct", "present")

    def __init__(
        self,
        name: str,
        type_: str,
        element: str | None,
        nullable: bool,
        tag: int | None,
        default: DefaultFactory,
        struct_: _StructDef | None,
        present: bool,
    ) -> None:
        self.name = name  # snake_case
        self.type = type_  # "int32", "string", "[]", "struct", ...
        self.element = element  # array element: a primitive type name or "struct"
        self.nullable = nullable
        self.tag = tag  # None unless tagged at this version
        self.default = default  # callable making the default value
        self.struct = struct_  # _StructDef for struct / array-of-struct
        self.present = present  # in this version (regular or tagged)


class _StructDef:
    """The fields of one struct at one version, plus the defaults of all its fields."""

    def __init__(self, fields: list[_Field], flexible: bool) -> None:
        self.fields = fields
        self.flexible = flexible
        # defaults() copies the immutable defaults from a template and makes lists and
        # structs afresh (decoders call it for every struct a version lacks).
        self._template = {f.name: f.default() for f in fields}
        self._fresh = [
            (f.name, f.default) for f in fields if isinstance(self._template[f.name], (list, dict))
        ]
        self.body_class = body_class(tuple(f.name for f in fields))

    def defaults(self) -> Body:
        body = self.body_class(self._template)
        for name, make in self._fresh:
            body[name] = make()
        return body


def _default_factory(
    field: dict[str, Any], type_: str, struct_def: _StructDef | None
) -> DefaultFactory:
    raw = field.get("default")
    value: Any
    if type_.startswith("[]"):
        return (lambda: None) if raw == "null" else list
    if struct_def is not None:
        return (lambda: None) if raw == "null" else struct_def.defaults
    if raw == "null":
        return lambda: None
    if type_ in ("int8", "int16", "uint16", "int32", "int64"):
        value = int(str(raw), 0) if raw is not None else 0
        return lambda: value
    if type_ == "float64":
        value = float(raw) if raw is not None else 0.0
        return lambda: value
    if type_ == "bool":
        value = str(raw).lower() == "true"
        return lambda: value
    if type_ == "string":
        value = raw if raw is not None else ""
        return lambda: value
    if type_ == "uuid":
        return lambda: _ZERO_UUID
    if type_ == "records":
        return lambda: None
    if type_ == "bytes":
        return lambda: b""
    raise ValueError(f"unknown type {type_!r} in field {field['name']}")


def _struct_def(
    fields: list[dict[str, Any]],
    version: int,
    flexible: bool,
    common: dict[str, list[dict[str, Any]]],
) -> _StructDef:
    out = []
    for f in fields:
        type_ = f["type"]
        base = type_[2:] if type_.startswith("[]") else type_
        sub = f.get("fields")
        if sub is None and base in common:
            sub = common[base]
        struct_def = _struct_def(sub, version, flexible, common) if sub is not None else None
        present = version_in(f.get("versions"), version)
        tag = None
        if flexible and present and version_in(f.get("taggedVersions"), version):
            tag = f["tag"]
        kind = "[]" if type_.startswith("[]") else ("struct" if struct_def else type_)
        element = None
        if kind == "[]":
            element = "struct" if struct_def is not None else base
        out.append(
            _Field(
                snake_case(f["name"]),
                kind,
                element,
                version_in(f.get("nullableVersions"), version),
                tag,
                _default_factory(f, type_, struct_def),
                struct_def,
                present,
            )
        )
    return _StructDef(out, flexible)


# -- runtime of the generated codecs ---------------------------------------------------------


def _decode_tagged(
    buf: ByteBuffer, pos: int, end: int, tagged: dict[int, tuple[str, Decoder]], obj: Body
) -> int:
    """Read a tagged-field section into ``obj`` (``tagged``: tag -> (name, decoder)); unknown
    tags are skipped. Returns the position after it."""
    count, pos = _read_uvarint(buf, pos, end)
    last = -1
    for _ in range(count):
        start = pos
        tag, pos = _read_uvarint(buf, pos, end)
        size, pos = _read_uvarint(buf, pos, end)
        if tag <= last:
            raise _error(f"tagged field {tag} out of order after {last}", start)
        last = tag
        if size > end - pos:
            raise _error(f"tagged field {tag} of {size} bytes exceeds the {end - pos} left", start)
        known = tagged.get(tag)
        if known is not None:
            name, decoder = known
            value, after = decoder(buf, pos, pos + size)
            if after != pos + size:
                raise _error(
                    f"tagged field {tag} ({name}) has {pos + size - after} bytes left over", pos
                )
            obj[name] = value
        pos += size
    return pos


_MISSING = object()


def _encode_tagged(
    get: Callable[[str, object], object],
    tagged: list[tuple[int, str, TaggedEncoder, DefaultFactory]],
    out: bytearray,
) -> None:
    """Write the tagged-field section: the fields of ``tagged`` ((tag, name, encoder, default
    factory), by tag) whose value ``get`` finds and differs from the default."""
    fields: list[tuple[int, bytes]] = []
    for tag, name, encoder, default in tagged:
        v = get(name, _MISSING)
        if v is _MISSING or v == default():
            continue
        chunks, _ = encoder(v)
        if len(chunks) > 1:
            raise FieldError(f"tagged field {name} cannot hold a FileRegion")
        fields.append((tag, cast(bytes, chunks[0])))  # the first chunk is always bytes
    _write_uvarint(len(fields), out)
    for tag, data in fields:
        _write_uvarint(tag, out)
        _write_uvarint(len(data), out)
        out += data


# Encoded strings with their length prefix (int16; uvarint in flexible versions), by value:
# topic names, hosts and ids recur in every response. Bounded: emptied when full.
_STRINGS: dict[str, bytes] = {}
_COMPACT_STRINGS: dict[str, bytes] = {}
_STRING_CACHE_ENTRIES = 4096


def _remember_string(cache: dict[str, bytes], value: str, n: int, data: bytes) -> None:
    """Cache ``data`` (``value`` in UTF-8, ``n`` bytes) with its length prefix."""
    if len(cache) >= _STRING_CACHE_ENTRIES:
        cache.clear()
    if cache is _STRINGS:
        cache[value] = _INT16.pack(n) + data
    else:
        prefix = bytearray()
        _write_uvarint(n + 1, prefix)
        cache[value] = bytes(prefix) + data


def _unknown_fields(value: Mapping[str, object], known: frozenset[str]) -> FieldError:
    return FieldError(
        f"unknown fields {sorted(set(value.keys()) - known)}; this struct has {sorted(known)}"
    )


_RUNTIME = {
    "Body": Body,
    "FieldError": FieldError,
    "FileRegion": FileRegion,
    "UUID": uuid.UUID,
    "_ZERO_UUID": _ZERO_UUID,
    "_MISSING": _MISSING,
    "_error": _error,
    "_read_uvarint": _read_uvarint,
    "_write_uvarint": _write_uvarint,
    "_decode_tagged": _decode_tagged,
    "_encode_tagged": _encode_tagged,
    "_unknown_fields": _unknown_fields,
    "_INT16": _INT16,
    "_INT32": _INT32,
    "_STRINGS": _STRINGS,
    "_COMPACT_STRINGS": _COMPACT_STRINGS,
    "_remember_string": _remember_string,
}
assert set(_RUNTIME) == set(compiler.RUNTIME_NAMES)


def _compile(
    name: str, struct_def: _StructDef, records_view: bool
) -> tuple[BodyDecoder, Encoder, str]:
    """Generate, compile and execute the codec source of ``struct_def``: (decode, encode,
    source). The source is put in linecache so tracebacks through it show its lines."""
    source, constants = compiler.generate(struct_def, records_view)
    filename = f"<codec {name}>"
    namespace = dict(_RUNTIME, **constants)
    exec(compile(source, filename, "exec"), namespace)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return cast(BodyDecoder, namespace["decode"]), cast(Encoder, namespace["encode"]), source


# -- messages --------------------------------------------------------------------------------


class MessageCodec:
    """The decoder and encoder of one message (e.g. ProduceRequest) at one version. A request's
    records fields decode to memoryview slices of the frame (compiler.generate's
    ``records_view``): the server hands each Produce frame's buffer over to its request."""

    __slots__ = ("name", "version", "flexible", "decode", "encode", "schema", "source")

    def __init__(
        self,
        name: str,
        version: int,
        flexible: bool,
        struct_def: _StructDef,
        records_view: bool = False,
    ) -> None:
        self.name = name
        self.version = version
        self.flexible = flexible
        self.decode: BodyDecoder
        self.encode: Encoder
        self.decode, self.encode, self.source = _compile(
            f"{name}V{version}", struct_def, records_view
        )
        self.schema = struct_def  # the field tree, for tests and tools that walk it

    def __repr__(self) -> str:
        return f"<{self.name}V{self.version}>"


def build_codec(message: dict[str, Any], version: int) -> MessageCodec:
    """The codec of ``message`` (an entry of definitions.MESSAGES) at ``version``."""
    flexible = version_in(message["flexibleVersions"], version)
    common = {s["name"]: s["fields"] for s in message.get("commonStructs", [])}
    return MessageCodec(
        message["name"],
        version,
        flexible,
        _struct_def(message["fields"], version, flexible, common),
        records_view=message["type"] == "request",
    )


def skip_tagged_fields(buf: ByteBuffer, pos: int, end: int) -> int:
    """The position after a tagged-fields section whose tags are all unknown here (request
    header v2, response header v1); FieldError if it does not fit in ``end``."""
    return _decode_tagged(buf, pos, end, {}, Body())
