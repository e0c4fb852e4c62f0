"""Fast codecs compiled from the declared construct schemas.

The construct schemas in this package are the declared wire format; parsing through construct
costs tens of microseconds per struct, too much for every Produce and Fetch. :func:`decoder` and
:func:`encoder` walk a schema once and return closures over precompiled ``struct.Struct``s:
consecutive fixed-size fields are read or written with one ``unpack_from`` / ``pack``, strings,
bytes and arrays with explicit bounds checks. The results are exactly what construct produces
(Containers and ListContainers with the same keys, None for nulls, the same bytes when
encoding); tests/protocol/test_schemas.py checks this for every schema on valid, mutated and
random input.

Decoders take ``(buf, pos, end)`` over any bytes-like buffer (usually a memoryview of the
receive buffer) and return ``(value, new_pos)``; BYTES fields are copied out once. A length or
count is checked against ``end`` before anything is read or allocated. Errors are
:class:`~protocol.primitives.FieldError` with ``offset`` = the index into ``buf`` of the bad
field. Encoders append to a bytearray and raise KeyError / TypeError / struct.error /
FieldError for values that do not fit (the caller reports them as BodyEncodeError).
"""
from __future__ import annotations

import struct
from typing import Callable

from construct import Container, Flag, FormatField, ListContainer, Renamed, Struct

from protocol.primitives import FieldError, KafkaArray, KafkaBytes, KafkaString, min_size

__all__ = ["decoder", "encoder"]

Decoder = Callable[[object, int, int], tuple[object, int]]
Encoder = Callable[[object, bytearray], None]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _error(message: str, offset: int) -> FieldError:
    err = FieldError(message)
    err.offset = offset
    return err


def _fixed_code(con) -> str | None:
    """The struct format character of a fixed-size field, or None."""
    if isinstance(con, Renamed):
        return _fixed_code(con.subcon)
    if con is Flag:
        return "?"  # unpacks any non-zero byte as True, as Kafka and construct's Flag do
    if isinstance(con, FormatField):
        return con.fmtstr[-1]
    return None


def _groups(struct_con: Struct):
    """Split a Struct's fields into runs: ('fixed', Struct, names) or ('var', name, subcon)."""
    groups, codes, names = [], "", []
    for sc in struct_con.subcons:
        code = _fixed_code(sc)
        if code is not None:
            codes += code
            names.append(sc.name)
            continue
        if codes:
            groups.append(("fixed", struct.Struct(">" + codes), tuple(names)))
            codes, names = "", []
        groups.append(("var", sc.name, sc.subcon))
    if codes:
        groups.append(("fixed", struct.Struct(">" + codes), tuple(names)))
    return groups


def decoder(con) -> Decoder:
    """A fast decoder equivalent to ``con.parse`` (see the module docstring)."""
    if isinstance(con, Renamed):
        return decoder(con.subcon)
    code = _fixed_code(con)
    if code is not None:
        return _fixed_decoder(struct.Struct(">" + code))
    if isinstance(con, KafkaString):
        return _string_decoder(con.nullable)
    if isinstance(con, KafkaBytes):
        return _bytes_decoder(con.nullable)
    if isinstance(con, KafkaArray):
        return _array_decoder(con)
    if isinstance(con, Struct):
        return _struct_decoder(con)
    raise TypeError(f"no fast decoder for {con!r}")


def _fixed_decoder(fmt: struct.Struct) -> Decoder:
    size = fmt.size
    unpack = fmt.unpack_from

    def decode(buf, pos, end):
        if end - pos < size:
            raise _error(f"truncated: {size} bytes needed, {end - pos} left", pos)
        return unpack(buf, pos)[0], pos + size
    return decode


def _string_decoder(nullable: bool) -> Decoder:
    def decode(buf, pos, end):
        if end - pos < 2:
            raise _error("truncated string length", pos)
        (length,) = _INT16.unpack_from(buf, pos)
        if length < 0:
            if length == -1 and nullable:
                return None, pos + 2
            raise _error(f"string length {length} is negative", pos)
        start = pos + 2
        if length > end - start:
            raise _error(f"string of {length} bytes exceeds the {end - start} left", pos)
        try:
            return str(buf[start:start + length], "utf-8"), start + length
        except UnicodeDecodeError as exc:
            raise _error(f"string is not valid UTF-8: {exc.reason}", start + exc.start) from None
    return decode


def _bytes_decoder(nullable: bool) -> Decoder:
    def decode(buf, pos, end):
        if end - pos < 4:
            raise _error("truncated bytes length", pos)
        (length,) = _INT32.unpack_from(buf, pos)
        if length < 0:
            if length == -1 and nullable:
                return None, pos + 4
            raise _error(f"bytes length {length} is negative", pos)
        start = pos + 4
        if length > end - start:
            raise _error(f"bytes of length {length} exceed the {end - start} left", pos)
        return bytes(buf[start:start + length]), start + length
    return decode


def _array_decoder(con: KafkaArray) -> Decoder:
    nullable = con.nullable
    element_min = min_size(con.subcon)
    code = _fixed_code(con.subcon)
    if code is not None:
        # Arrays of a primitive (replicas, isr, offsets): one unpack for the whole array.
        item_size = struct.calcsize(">" + code)
        formats: dict[int, struct.Struct] = {}

        def decode_fixed(buf, pos, end):
            count, pos = _array_count(buf, pos, end, nullable, item_size)
            if count is None:
                return None, pos
            fmt = formats.get(count)
            if fmt is None:
                fmt = struct.Struct(f">{count}{code}")
                if count <= 64:
                    formats[count] = fmt
            return ListContainer(fmt.unpack_from(buf, pos)), pos + fmt.size
        return decode_fixed

    element = decoder(con.subcon)

    def decode(buf, pos, end):
        count, pos = _array_count(buf, pos, end, nullable, element_min)
        if count is None:
            return None, pos
        items = ListContainer()
        append = items.append
        for _ in range(count):
            item, pos = element(buf, pos, end)
            append(item)
        return items, pos
    return decode


def _array_count(buf, pos: int, end: int, nullable: bool, element_min: int):
    if end - pos < 4:
        raise _error("truncated array count", pos)
    (count,) = _INT32.unpack_from(buf, pos)
    if count < 0:
        if count == -1 and nullable:
            return None, pos + 4
        raise _error(f"array count {count} is negative", pos)
    left = end - pos - 4
    if count * element_min > left:
        raise _error(f"array of {count} elements (at least {element_min} bytes each) cannot "
                     f"fit in the {left} bytes left", pos)
    return count, pos + 4


def _struct_decoder(con: Struct) -> Decoder:
    steps = []
    for kind, a, b in _groups(con):
        if kind == "fixed":
            steps.append((True, a.unpack_from, a.size, b))
        else:
            steps.append((False, decoder(b), 0, a))

    def decode(buf, pos, end):
        obj = Container()
        for fixed, fn, size, names in steps:
            if fixed:
                if end - pos < size:
                    raise _error(f"truncated: {size} bytes needed for {', '.join(names)}, "
                                 f"{end - pos} left", pos)
                for name, value in zip(names, fn(buf, pos)):
                    obj[name] = value
                pos += size
            else:
                obj[names], pos = fn(buf, pos, end)
        return obj, pos
    return decode


def encoder(con) -> Encoder:
    """A fast encoder producing the bytes ``con.build`` produces (see the module docstring)."""
    if isinstance(con, Renamed):
        return encoder(con.subcon)
    code = _fixed_code(con)
    if code is not None:
        pack = struct.Struct(">" + code).pack

        def encode_fixed(value, out):
            out += pack(value)
        return encode_fixed
    if isinstance(con, (KafkaString, KafkaBytes)):
        return _variable_encoder(con)
    if isinstance(con, KafkaArray):
        return _array_encoder(con)
    if isinstance(con, Struct):
        return _struct_encoder(con)
    raise TypeError(f"no fast encoder for {con!r}")


def _variable_encoder(con) -> Encoder:
    is_string = isinstance(con, KafkaString)
    nullable = con.nullable
    null = b"\xff\xff" if is_string else b"\xff\xff\xff\xff"
    length = _INT16.pack if is_string else _INT32.pack
    kind = "STRING" if is_string else "BYTES"

    def encode(value, out):
        if value is None:
            if not nullable:
                raise FieldError(f"None given for a non-nullable {kind}")
            out += null
            return
        if is_string:
            if not isinstance(value, str):
                raise FieldError(f"STRING needs str, got {type(value).__name__}")
            data = value.encode("utf-8")
            if len(data) > 0x7FFF:
                raise FieldError(f"string of {len(data)} bytes exceeds 32767")
        else:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise FieldError(f"BYTES needs a bytes-like object, got {type(value).__name__}")
            data = value if not isinstance(value, memoryview) else value.cast("B")
        out += length(len(data))
        out += data
    return encode


def _array_encoder(con: KafkaArray) -> Encoder:
    nullable = con.nullable
    element = encoder(con.subcon)

    def encode(value, out):
        if value is None:
            if not nullable:
                raise FieldError("None given for a non-nullable ARRAY")
            out += b"\xff\xff\xff\xff"
            return
        items = value if isinstance(value, (list, tuple)) else list(value)
        out += _INT32.pack(len(items))
        for item in items:
            element(item, out)
    return encode


def _struct_encoder(con: Struct) -> Encoder:
    steps = []
    for kind, a, b in _groups(con):
        if kind == "fixed":
            steps.append((True, a.pack, b))
        else:
            steps.append((False, encoder(b), a))

    def encode(value, out):
        for fixed, fn, names in steps:
            if fixed:
                out += fn(*[value[name] for name in names])
            else:
                fn(value[names], out)
    return encode
