"""Codecs built from Kafka's message definitions: one decoder and one encoder per (message,
version), compiled once into closures over precompiled ``struct.Struct``s (kio's approach).

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
index into ``buf``. Encoders append to a :class:`Output`; a records field holding a
:class:`~protocol.api.FileRegion` (or large bytes) is kept as a chunk of its own, so Fetch
responses go out by sendfile without copying.
"""
from __future__ import annotations

import re
import struct
import uuid
from typing import Any, Callable

from protocol.api import FileRegion

__all__ = ["Body", "FieldError", "Output", "MessageCodec", "build_codec", "snake_case",
           "version_in", "skip_tagged_fields"]

Decoder = Callable[[Any, int, int], tuple[Any, int]]
Encoder = Callable[[Any, "Output"], None]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FIXED = {"int8": "b", "int16": "h", "uint16": "H", "int32": "i", "int64": "q",
          "float64": "d", "bool": "?"}
_ZERO_UUID = uuid.UUID(int=0)
# Records at least this large go out as their own chunk instead of being copied.
_SEPARATE_CHUNK = 16384


class FieldError(ValueError):
    """Raised by the codecs when a field's length, count or content is invalid (negative, too
    long for what is left, not UTF-8, wrong type); protocol.schemas reports it as
    MalformedFrameError on decode and BodyEncodeError on encode. ``offset`` is the byte index
    of the bad field when decoding."""

    offset: int | None = None


class Body(dict):
    """A decoded struct: a dict whose keys are also attributes (``body.topics``)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Output(bytearray):
    """An encoder's output: bytes, plus the chunks split off for records fields."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list = []
        self.split_total = 0  # bytes already moved into ``chunks``

    def split(self, region) -> None:
        """Close the current bytes as a chunk and add ``region`` (bytes or FileRegion)."""
        self.chunks.append(bytes(self))
        self.split_total += len(self)
        del self[:]
        self.chunks.append(region)
        self.split_total += region.length if isinstance(region, FileRegion) else len(region)

    def finish(self) -> tuple[list, int]:
        """(chunks in wire order, total length); the first chunk is always bytes."""
        if not self.chunks:
            return [bytes(self)], len(self)
        chunks = self.chunks + ([bytes(self)] if self else [])
        return chunks, self.split_total + len(self)


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

def _read_uvarint(buf, pos: int, end: int) -> tuple[int, int]:
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

    __slots__ = ("name", "type", "element", "nullable", "tag", "default", "struct",
                 "present")

    def __init__(self, name, type_, element, nullable, tag, default, struct_, present):
        self.name = name          # snake_case
        self.type = type_         # "int32", "string", "[]", "struct", ...
        self.element = element    # array element: a primitive type name or "struct"
        self.nullable = nullable
        self.tag = tag            # None unless tagged at this version
        self.default = default    # callable making the default value
        self.struct = struct_     # _StructDef for struct / array-of-struct
        self.present = present    # in this version (regular or tagged)


class _StructDef:
    """The fields of one struct at one version, plus the defaults of all its fields."""

    def __init__(self, fields: list[_Field], flexible: bool) -> None:
        self.fields = fields
        self.flexible = flexible

    def defaults(self) -> Body:
        return Body((f.name, f.default()) for f in self.fields)


def _default_factory(field: dict, type_: str, struct_def: _StructDef | None):
    raw = field.get("default")
    if type_.startswith("[]"):
        return (lambda: None) if raw == "null" else list
    if struct_def is not None:
        return struct_def.defaults
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


def _struct_def(fields: list[dict], version: int, flexible: bool,
                common: dict[str, list[dict]]) -> _StructDef:
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
        out.append(_Field(snake_case(f["name"]), kind, element,
                          version_in(f.get("nullableVersions"), version), tag,
                          _default_factory(f, type_, struct_def), struct_def, present))
    return _StructDef(out, flexible)


# -- decoders --------------------------------------------------------------------------------

def _length_decoder(flexible: bool, wide: bool):
    """(length or None for null, position after the prefix)."""
    if flexible:
        def decode(buf, pos, end):
            n, pos = _read_uvarint(buf, pos, end)
            return (n - 1 if n else None), pos
        return decode
    fmt = _INT32 if wide else _INT16

    def decode_classic(buf, pos, end):
        if end - pos < fmt.size:
            raise _error("truncated length", pos)
        (n,) = fmt.unpack_from(buf, pos)
        if n < 0:
            if n == -1:
                return None, pos + fmt.size
            raise _error(f"length {n} is negative", pos)
        return n, pos + fmt.size
    return decode_classic


def _primitive_decoder(type_: str, nullable: bool, flexible: bool) -> Decoder:
    if type_ in _FIXED:
        fmt = struct.Struct(">" + _FIXED[type_])
        size, unpack = fmt.size, fmt.unpack_from

        def decode_fixed(buf, pos, end):
            if end - pos < size:
                raise _error(f"truncated: {size} bytes needed, {end - pos} left", pos)
            return unpack(buf, pos)[0], pos + size
        return decode_fixed
    if type_ == "uuid":
        def decode_uuid(buf, pos, end):
            if end - pos < 16:
                raise _error("truncated uuid", pos)
            return uuid.UUID(bytes=bytes(buf[pos:pos + 16])), pos + 16
        return decode_uuid
    length = _length_decoder(flexible, type_ != "string")
    is_string = type_ == "string"
    what = "string" if is_string else type_

    def decode(buf, pos, end):
        n, start = length(buf, pos, end)
        if n is None:
            if nullable:
                return None, start
            raise _error(f"null {what} where it is not nullable", pos)
        if n > end - start:
            raise _error(f"{what} of {n} bytes exceeds the {end - start} left", pos)
        if is_string:
            try:
                return str(buf[start:start + n], "utf-8"), start + n
            except UnicodeDecodeError as exc:
                raise _error(f"string is not valid UTF-8: {exc.reason}",
                             start + exc.start) from None
        return bytes(buf[start:start + n]), start + n
    return decode


def _min_size(f: _Field, flexible: bool) -> int:
    if f.type in _FIXED:
        return struct.calcsize(">" + _FIXED[f.type])
    if f.type == "uuid":
        return 16
    if f.type == "struct":
        return _struct_min(f.struct)
    if flexible:
        return 1
    return 2 if f.type == "string" else 4


def _struct_min(s: _StructDef) -> int:
    return (sum(_min_size(f, s.flexible) for f in s.fields if f.present and f.tag is None)
            + (1 if s.flexible else 0))


def _field_decoder(f: _Field, flexible: bool) -> Decoder:
    if f.type == "struct":
        return _struct_decoder(f.struct)
    if f.type != "[]":
        return _primitive_decoder(f.type, f.nullable, flexible)
    if f.element == "struct":
        element = _struct_decoder(f.struct)
        element_min = max(_struct_min(f.struct), 1)
    else:
        element = _primitive_decoder(f.element, False, flexible)
        element_min = _min_size(_Field("", f.element, None, False, None, None, None, True),
                                flexible)
    count_of = _length_decoder(flexible, True)
    nullable = f.nullable

    def decode_array(buf, pos, end):
        count, p = count_of(buf, pos, end)
        if count is None:
            if nullable:
                return None, p
            raise _error(f"null array {f.name} where it is not nullable", pos)
        if count * element_min > end - p:
            raise _error(f"array {f.name} of {count} elements (at least {element_min} bytes "
                         f"each) cannot fit in the {end - p} bytes left", pos)
        items = []
        append = items.append
        for _ in range(count):
            item, p = element(buf, p, end)
            append(item)
        return items, p
    return decode_array


def _struct_decoder(s: _StructDef) -> Decoder:
    steps: list[tuple] = []  # ("fixed", Struct, names) | ("var", name, decoder)
    codes, names = "", []
    for f in s.fields:
        if not f.present or f.tag is not None:
            continue
        if f.type in _FIXED:
            codes += _FIXED[f.type]
            names.append(f.name)
            continue
        if codes:
            steps.append(("fixed", struct.Struct(">" + codes), tuple(names)))
            codes, names = "", []
        steps.append(("var", f.name, _field_decoder(f, s.flexible)))
    if codes:
        steps.append(("fixed", struct.Struct(">" + codes), tuple(names)))
    tagged = {f.tag: (f.name, _field_decoder(f, s.flexible)) for f in s.fields
              if f.present and f.tag is not None}
    defaults = s.defaults
    flexible = s.flexible

    def decode(buf, pos, end):
        obj = defaults()
        for kind, a, b in steps:
            if kind == "fixed":
                if end - pos < a.size:
                    raise _error(f"truncated: {a.size} bytes needed for {', '.join(b)}, "
                                 f"{end - pos} left", pos)
                obj.update(zip(b, a.unpack_from(buf, pos)))
                pos += a.size
            else:
                obj[a], pos = b(buf, pos, end)
        if flexible:
            pos = _decode_tagged(buf, pos, end, tagged, obj)
        return obj, pos
    return decode


def _decode_tagged(buf, pos: int, end: int, tagged: dict, obj: Body) -> int:
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
            raise _error(f"tagged field {tag} of {size} bytes exceeds the {end - pos} left",
                         start)
        known = tagged.get(tag)
        if known is not None:
            name, decoder = known
            value, after = decoder(buf, pos, pos + size)
            if after != pos + size:
                raise _error(f"tagged field {tag} ({name}) has {pos + size - after} bytes "
                             f"left over", pos)
            obj[name] = value
        pos += size
    return pos


# -- encoders --------------------------------------------------------------------------------

def _length_encoder(flexible: bool, wide: bool):
    if flexible:
        def encode(n, out):
            _write_uvarint(0 if n is None else n + 1, out)
        return encode
    fmt = _INT32 if wide else _INT16
    null = fmt.pack(-1)

    def encode_classic(n, out):
        out += null if n is None else fmt.pack(n)
    return encode_classic


def _primitive_encoder(type_: str, nullable: bool, flexible: bool, name: str) -> Encoder:
    if type_ in _FIXED:
        pack = struct.Struct(">" + _FIXED[type_]).pack

        def encode_fixed(value, out):
            out += pack(value)
        return encode_fixed
    if type_ == "uuid":
        def encode_uuid(value, out):
            out += (value or _ZERO_UUID).bytes
        return encode_uuid
    length = _length_encoder(flexible, type_ != "string")
    is_string = type_ == "string"
    is_records = type_ == "records"
    limit = 0x7FFF if is_string and not flexible else 0x7FFFFFFF

    def encode(value, out):
        if value is None:
            if not nullable:
                raise FieldError(f"None given for {name}, which is not nullable here")
            length(None, out)
            return
        if is_string:
            if not isinstance(value, str):
                raise FieldError(f"{name} needs str, got {type(value).__name__}")
            data = value.encode("utf-8")
        elif is_records and isinstance(value, FileRegion):
            length(value.length, out)
            out.split(value)
            return
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = value if not isinstance(value, memoryview) else value.cast("B")
        else:
            raise FieldError(f"{name} needs bytes, got {type(value).__name__}")
        if len(data) > limit:
            raise FieldError(f"{name} of {len(data)} bytes exceeds {limit}")
        length(len(data), out)
        if is_records and len(data) >= _SEPARATE_CHUNK:
            out.split(bytes(data))
        else:
            out += data
    return encode


def _field_encoder(f: _Field, flexible: bool) -> Encoder:
    if f.type == "struct":
        return _struct_encoder(f.struct)
    if f.type != "[]":
        return _primitive_encoder(f.type, f.nullable, flexible, f.name)
    if f.element == "struct":
        element = _struct_encoder(f.struct)
    else:
        element = _primitive_encoder(f.element, False, flexible, f.name)
    count = _length_encoder(flexible, True)
    nullable = f.nullable
    name = f.name

    def encode_array(value, out):
        if value is None:
            if not nullable:
                raise FieldError(f"None given for array {name}, which is not nullable here")
            count(None, out)
            return
        items = value if isinstance(value, (list, tuple)) else list(value)
        count(len(items), out)
        for item in items:
            element(item, out)
    return encode_array


_MISSING = object()


def _struct_encoder(s: _StructDef) -> Encoder:
    steps: list[tuple] = []  # ("fixed", pack, names, defaults) | ("var", name, encoder, default)
    codes, names, defaults = "", [], []
    for f in s.fields:
        if not f.present or f.tag is not None:
            continue
        if f.type in _FIXED:
            codes += _FIXED[f.type]
            names.append(f.name)
            defaults.append(f.default())
            continue
        if codes:
            steps.append(("fixed", struct.Struct(">" + codes).pack, tuple(names),
                          tuple(defaults)))
            codes, names, defaults = "", [], []
        steps.append(("var", f.name, _field_encoder(f, s.flexible), f.default))
    if codes:
        steps.append(("fixed", struct.Struct(">" + codes).pack, tuple(names), tuple(defaults)))
    tagged = [(f.tag, f.name, _field_encoder(f, s.flexible), f.default) for f in
              sorted((f for f in s.fields if f.present and f.tag is not None),
                     key=lambda f: f.tag)]
    flexible = s.flexible
    known = frozenset(f.name for f in s.fields)

    def encode(value, out):
        if not known.issuperset(value.keys()):
            raise FieldError(f"unknown fields {sorted(set(value.keys()) - known)}; this struct "
                             f"has {sorted(known)}")
        get = value.get
        for kind, a, b, c in steps:
            if kind == "fixed":
                out += a(*[get(n, d) for n, d in zip(b, c)])
            else:
                v = get(a, _MISSING)
                b(c() if v is _MISSING else v, out)
        if flexible:
            _encode_tagged(get, tagged, out)
    return encode


def _encode_tagged(get, tagged, out) -> None:
    fields = []
    for tag, name, encoder, default in tagged:
        v = get(name, _MISSING)
        if v is _MISSING or v == default():
            continue
        data = Output()
        encoder(v, data)
        if data.chunks:
            raise FieldError(f"tagged field {name} cannot hold a FileRegion")
        fields.append((tag, data))
    _write_uvarint(len(fields), out)
    for tag, data in fields:
        _write_uvarint(tag, out)
        _write_uvarint(len(data), out)
        out += data


# -- messages --------------------------------------------------------------------------------

class MessageCodec:
    """The decoder and encoder of one message (e.g. ProduceRequest) at one version."""

    __slots__ = ("name", "version", "flexible", "decode", "encode", "schema")

    def __init__(self, name: str, version: int, flexible: bool, struct_def: _StructDef) -> None:
        self.name = name
        self.version = version
        self.flexible = flexible
        self.decode: Decoder = _struct_decoder(struct_def)
        self.encode: Encoder = _struct_encoder(struct_def)
        self.schema = struct_def  # the field tree, for tests and tools that walk it

    def __repr__(self) -> str:
        return f"<{self.name}V{self.version}>"


def build_codec(message: dict, version: int) -> MessageCodec:
    """The codec of ``message`` (an entry of definitions.MESSAGES) at ``version``."""
    flexible = version_in(message["flexibleVersions"], version)
    common = {s["name"]: s["fields"] for s in message.get("commonStructs", [])}
    return MessageCodec(message["name"], version, flexible,
                        _struct_def(message["fields"], version, flexible, common))


def skip_tagged_fields(buf, pos: int, end: int) -> int:
    """The position after a tagged-fields section whose tags are all unknown here (request
    header v2, response header v1); FieldError if it does not fit in ``end``."""
    return _decode_tagged(buf, pos, end, {}, Body())
