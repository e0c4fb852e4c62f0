"""The codec interpreter that protocol/schemas/codec.py used before its compiler: closures
walking the same field tree, kept as the oracle the compiled codecs are checked against
(test_codec_compiler.py). It is the previous implementation verbatim, less what the compiled
codec still shares (the field tree, varints, tagged-field decoding, the error type), plus the
Output buffer it wrote to: its results and its errors, messages and offsets included, are the
behaviour the compiled codecs must keep."""

from __future__ import annotations

import struct
import uuid

from protocol.api import FileRegion
from protocol.schemas.codec import (
    Decoder,
    Encoder,
    FieldError,
    _decode_tagged,
    _error,
    _Field,
    _read_uvarint,
    _StructDef,
    _write_uvarint,
)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FIXED = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "bool": "?",
}
_ZERO_UUID = uuid.UUID(int=0)
_SEPARATE_CHUNK = 16384
_MISSING = object()


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


def _primitive_decoder(type_: str, nullable: bool, flexible: bool, records_view: bool) -> Decoder:
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
            return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16

        return decode_uuid
    length = _length_decoder(flexible, type_ != "string")
    is_string = type_ == "string"
    view = type_ == "records" and records_view  # a slice of buf, as the server decodes requests
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
                return str(buf[start : start + n], "utf-8"), start + n
            except UnicodeDecodeError as exc:
                raise _error(
                    f"string is not valid UTF-8: {exc.reason}", start + exc.start
                ) from None
        if view:
            return buf[start : start + n], start + n
        return bytes(buf[start : start + n]), start + n

    return decode


def _min_size(f: _Field, flexible: bool) -> int:
    if f.type in _FIXED:
        return struct.calcsize(">" + _FIXED[f.type])
    if f.type == "uuid":
        return 16
    if f.type == "struct":
        return 1 if f.nullable else _struct_min(f.struct)
    if flexible:
        return 1
    return 2 if f.type == "string" else 4


def _struct_min(s: _StructDef) -> int:
    return sum(_min_size(f, s.flexible) for f in s.fields if f.present and f.tag is None) + (
        1 if s.flexible else 0
    )


def _field_decoder(f: _Field, flexible: bool, records_view: bool) -> Decoder:
    if f.type == "struct" and f.nullable:
        present = _struct_decoder(f.struct, records_view)

        def decode_nullable(buf, pos, end):
            if end - pos < 1:
                raise _error(f"truncated: no null marker for {f.name}", pos)
            if struct.unpack_from(">b", buf, pos)[0] < 0:
                return None, pos + 1
            return present(buf, pos + 1, end)

        return decode_nullable
    if f.type == "struct":
        return _struct_decoder(f.struct, records_view)
    if f.type != "[]":
        return _primitive_decoder(f.type, f.nullable, flexible, records_view)
    if f.element == "struct":
        element = _struct_decoder(f.struct, records_view)
        element_min = max(_struct_min(f.struct), 1)
    else:
        element = _primitive_decoder(f.element, False, flexible, records_view)
        element_min = _min_size(
            _Field("", f.element, None, False, None, None, None, True), flexible
        )
    count_of = _length_decoder(flexible, True)
    nullable = f.nullable

    def decode_array(buf, pos, end):
        count, p = count_of(buf, pos, end)
        if count is None:
            if nullable:
                return None, p
            raise _error(f"null array {f.name} where it is not nullable", pos)
        if count * element_min > end - p:
            raise _error(
                f"array {f.name} of {count} elements (at least {element_min} bytes "
                f"each) cannot fit in the {end - p} bytes left",
                pos,
            )
        items = []
        append = items.append
        for _ in range(count):
            item, p = element(buf, p, end)
            append(item)
        return items, p

    return decode_array


def _struct_decoder(s: _StructDef, records_view: bool) -> Decoder:
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
        steps.append(("var", f.name, _field_decoder(f, s.flexible, records_view)))
    if codes:
        steps.append(("fixed", struct.Struct(">" + codes), tuple(names)))
    tagged = {
        f.tag: (f.name, _field_decoder(f, s.flexible, records_view))
        for f in s.fields
        if f.present and f.tag is not None
    }
    defaults = s.defaults
    flexible = s.flexible

    def decode(buf, pos, end):
        obj = defaults()
        for kind, a, b in steps:
            if kind == "fixed":
                if end - pos < a.size:
                    raise _error(
                        f"truncated: {a.size} bytes needed for {', '.join(b)}, {end - pos} left",
                        pos,
                    )
                obj.update(zip(b, a.unpack_from(buf, pos)))
                pos += a.size
            else:
                obj[a], pos = b(buf, pos, end)
        if flexible:
            pos = _decode_tagged(buf, pos, end, tagged, obj)
        return obj, pos

    return decode


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
    if f.type == "struct" and f.nullable:
        present = _struct_encoder(f.struct)

        def encode_nullable(value, out):
            if value is None:
                out += b"\xff"
            else:
                out += b"\x01"
                present(value, out)

        return encode_nullable
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
            steps.append(("fixed", struct.Struct(">" + codes).pack, tuple(names), tuple(defaults)))
            codes, names, defaults = "", [], []
        steps.append(("var", f.name, _field_encoder(f, s.flexible), f.default))
    if codes:
        steps.append(("fixed", struct.Struct(">" + codes).pack, tuple(names), tuple(defaults)))
    tagged = [
        (f.tag, f.name, _field_encoder(f, s.flexible), f.default)
        for f in sorted(
            (f for f in s.fields if f.present and f.tag is not None), key=lambda f: f.tag
        )
    ]
    flexible = s.flexible
    known = frozenset(f.name for f in s.fields)

    def encode(value, out):
        if not known.issuperset(value.keys()):
            raise FieldError(
                f"unknown fields {sorted(set(value.keys()) - known)}; this struct "
                f"has {sorted(known)}"
            )
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


def decoder(struct_def: _StructDef, records_view: bool = False):
    """``(buf, pos, end) -> (Body, pos)`` for a message's field tree; with ``records_view``
    (requests) a records field is a slice of ``buf``, as the compiled decoders give it."""
    return _struct_decoder(struct_def, records_view)


def encoder(struct_def: _StructDef):
    """``(value) -> (chunks, total)`` for a message's field tree, as the compiled encoders
    return."""
    encode = _struct_encoder(struct_def)

    def encode_chunks(value):
        out = Output()
        encode(value, out)
        return out.finish()

    return encode_chunks
