"""Kafka's wire primitives as construct classes (Protocol.java's ``Type``s).

All integers are big-endian and signed. Variable-length types:

- STRING: int16 length N >= 0, then N bytes of UTF-8.
- NULLABLE_STRING: as STRING, length -1 = None.
- BYTES: int32 length N >= 0, then N bytes. NULLABLE_BYTES: length -1 = None.
- ARRAY: int32 count N >= 0, then N elements. NULLABLE ARRAY: count -1 = None (v1+ Metadata).
- RECORDS: a message set carried as opaque BYTES.

Parsing never allocates more than the input holds: a length or count is checked against the bytes
left in the stream before anything is read, so a hostile 2**31-1 does not cost memory or time.
Every failure raises a :class:`construct.ConstructError` subclass; the codec layer turns those into
:class:`protocol.errors.MalformedFrameError` with the api, version and byte offset.
"""
from __future__ import annotations

import struct

from construct import (
    Construct,
    ConstructError,
    Flag,
    FormatField,
    Int8sb,
    Int16sb,
    Int32sb,
    Int64sb,
    ListContainer,
    Renamed,
    SizeofError,
    Struct,
    Subconstruct,
)
from construct.core import stream_read, stream_size, stream_write

__all__ = [
    "INT8", "INT16", "INT32", "INT64", "BOOLEAN", "STRING", "NULLABLE_STRING", "BYTES",
    "NULLABLE_BYTES", "RECORDS", "Array", "NullableArray", "KafkaString", "KafkaBytes",
    "KafkaArray", "FieldError", "min_size",
]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

INT8 = Int8sb
INT16 = Int16sb
INT32 = Int32sb
INT64 = Int64sb
# Kafka reads any non-zero byte as true and writes 1 / 0, which is what Flag does.
BOOLEAN = Flag


class FieldError(ConstructError):
    """Raised by the primitives and the compiled codecs when a field's length, count or
    content is invalid (negative, too long, not UTF-8, wrong type); protocol.schemas reports it
    as MalformedFrameError on decode and BodyEncodeError on encode."""


def _remaining(stream) -> int:
    return stream_size(stream) - stream.tell()


class KafkaString(Construct):
    """STRING / NULLABLE_STRING: int16 length + UTF-8 bytes; -1 = None when nullable."""

    def __init__(self, nullable: bool) -> None:
        super().__init__()
        self.nullable = nullable

    def _parse(self, stream, context, path):
        (length,) = _INT16.unpack(stream_read(stream, 2, path))
        if length < 0:
            if length == -1 and self.nullable:
                return None
            raise FieldError(f"string length {length} is negative", path=path)
        data = stream_read(stream, length, path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FieldError(f"string is not valid UTF-8: {exc.reason} at byte {exc.start}",
                             path=path) from None

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise FieldError("None given for a non-nullable STRING", path=path)
            stream_write(stream, b"\xff\xff", 2, path)
            return obj
        if not isinstance(obj, str):
            raise FieldError(f"STRING needs str, got {type(obj).__name__}", path=path)
        data = obj.encode("utf-8")
        if len(data) > 0x7FFF:
            raise FieldError(f"string of {len(data)} bytes exceeds 32767", path=path)
        stream_write(stream, _INT16.pack(len(data)) + data, 2 + len(data), path)
        return obj

    def _sizeof(self, context, path):
        raise SizeofError("STRING has variable size", path=path)


class KafkaBytes(Construct):
    """BYTES / NULLABLE_BYTES: int32 length + raw bytes; -1 = None when nullable.

    Parsing returns ``bytes`` (one copy out of the frame). Building accepts bytes, bytearray and
    memoryview.
    """

    def __init__(self, nullable: bool) -> None:
        super().__init__()
        self.nullable = nullable

    def _parse(self, stream, context, path):
        (length,) = _INT32.unpack(stream_read(stream, 4, path))
        if length < 0:
            if length == -1 and self.nullable:
                return None
            raise FieldError(f"bytes length {length} is negative", path=path)
        # BytesIO.read never returns more than it holds; stream_read then reports the shortfall.
        return stream_read(stream, length, path)

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise FieldError("None given for non-nullable BYTES", path=path)
            stream_write(stream, b"\xff\xff\xff\xff", 4, path)
            return obj
        if not isinstance(obj, (bytes, bytearray, memoryview)):
            raise FieldError(f"BYTES needs a bytes-like object, got {type(obj).__name__}",
                             path=path)
        data = bytes(obj)
        stream_write(stream, _INT32.pack(len(data)) + data, 4 + len(data), path)
        return obj

    def _sizeof(self, context, path):
        raise SizeofError("BYTES has variable size", path=path)


class KafkaArray(Subconstruct):
    """ARRAY: int32 count + elements; -1 = None when nullable. Parses to a ListContainer."""

    def __init__(self, subcon, nullable: bool) -> None:
        super().__init__(subcon)
        self.nullable = nullable
        self.element_min = min_size(subcon)

    def _parse(self, stream, context, path):
        (count,) = _INT32.unpack(stream_read(stream, 4, path))
        if count < 0:
            if count == -1 and self.nullable:
                return None
            raise FieldError(f"array count {count} is negative", path=path)
        left = _remaining(stream)
        if count * self.element_min > left:
            raise FieldError(f"array of {count} elements (at least {self.element_min} bytes "
                             f"each) cannot fit in the {left} bytes left", path=path)
        parse = self.subcon._parsereport
        return ListContainer([parse(stream, context, path) for _ in range(count)])

    def _build(self, obj, stream, context, path):
        if obj is None:
            if not self.nullable:
                raise FieldError("None given for a non-nullable ARRAY", path=path)
            stream_write(stream, b"\xff\xff\xff\xff", 4, path)
            return obj
        items = list(obj)
        stream_write(stream, _INT32.pack(len(items)), 4, path)
        build = self.subcon._build
        for item in items:
            build(item, stream, context, path)
        return obj

    def _sizeof(self, context, path):
        raise SizeofError("ARRAY has variable size", path=path)


def min_size(con) -> int:
    """The fewest bytes ``con`` can occupy on the wire (for array count sanity checks)."""
    if isinstance(con, Renamed):
        return min_size(con.subcon)
    if isinstance(con, FormatField):
        return con.length
    if con is Flag:
        return 1
    if isinstance(con, KafkaString):
        return 2
    if isinstance(con, (KafkaBytes, KafkaArray)):
        return 4
    if isinstance(con, Struct):
        return sum(min_size(sc) for sc in con.subcons)
    raise TypeError(f"no Kafka wire size known for {con!r}")


STRING = KafkaString(nullable=False)
NULLABLE_STRING = KafkaString(nullable=True)
BYTES = KafkaBytes(nullable=False)
NULLABLE_BYTES = KafkaBytes(nullable=True)
# Protocol.java 0.10.1 declares record_set as BYTES; its content is a message set (records.py).
RECORDS = BYTES


def Array(subcon) -> KafkaArray:  # noqa: N802 - reads like a type in schema declarations
    """A non-nullable Kafka ARRAY of ``subcon``."""
    return KafkaArray(subcon, nullable=False)


def NullableArray(subcon) -> KafkaArray:  # noqa: N802
    """A Kafka ARRAY of ``subcon`` whose count -1 means None."""
    return KafkaArray(subcon, nullable=True)
