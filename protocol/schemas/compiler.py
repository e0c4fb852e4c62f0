"""Python source for one message version's decoder and encoder, generated from its field tree.

Why generate source: interpreting the tree costs a closure call, a tuple unpack and a dict
lookup per field, 3-4x what the hand-written codecs cost. Here every field becomes
straight-line code in one function per direction: runs of fixed-width fields read or written
with one precompiled ``struct.Struct``, nested structs and array elements inlined into their
loops, arrays of fixed-width structs read with ``iter_unpack``, and the common one-byte cases
(a short compact length, an empty tagged-field section) read without a call.

This module only writes text. :func:`protocol.schemas.codec.build_codec` executes it in a
namespace holding the runtime helpers the text names (``Body``, ``_error`` and friends, listed
in :data:`RUNTIME_NAMES`) plus the constants the generator collected (structs, templates,
default factories). The semantics, error messages and offsets are those of the wire types
documented in :mod:`protocol.schemas.codec`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Literal, TypeAlias

    from protocol.schemas.codec import _Field, _StructDef

    # A run of _fixed_runs: ("fixed", codes, fields) or ("var", field).
    _Run: TypeAlias = tuple[Literal["fixed"], str, list[_Field]] | tuple[Literal["var"], _Field]

__all__ = ["RUNTIME_NAMES", "generate"]

# struct format character of each fixed-width wire type ("?" reads any non-zero byte as true).
FIXED_CODES = {
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "int64": "q",
    "float64": "d",
    "bool": "?",
}
# Records at least this large go out as their own chunk instead of being copied.
SEPARATE_CHUNK = 16384
# Encoded strings up to this many bytes are cached with their length prefix.
CACHED_STRING_BYTES = 255

# A null string (int16 -1) and a null bytes, records or array (int32 -1), by "wide".
_NULL_LENGTH = {False: b"\xff\xff", True: b"\xff\xff\xff\xff"}
# Names the generated text uses and the executing namespace must provide.
RUNTIME_NAMES = (
    "Body",
    "FieldError",
    "FileRegion",
    "UUID",
    "_ZERO_UUID",
    "_MISSING",
    "_error",
    "_read_uvarint",
    "_write_uvarint",
    "_decode_tagged",
    "_encode_tagged",
    "_unknown_fields",
    "_INT16",
    "_INT32",
    "_STRINGS",
    "_COMPACT_STRINGS",
    "_remember_string",
)


def _min_size(type_: str, struct_def: _StructDef | None, flexible: bool) -> int:
    """The fewest bytes a value of ``type_`` (a primitive, or "struct" with ``struct_def``)
    takes on the wire: bounds an array's count before anything is allocated."""
    if type_ in FIXED_CODES:
        return struct.calcsize(">" + FIXED_CODES[type_])
    if type_ == "uuid":
        return 16
    if type_ == "struct":
        assert struct_def is not None  # a struct field has its struct (codec._struct_def)
        return sum(
            1
            if f.type == "struct" and f.nullable
            else _min_size(f.type, f.struct, struct_def.flexible)
            for f in struct_def.fields
            if f.present and f.tag is None
        ) + (1 if struct_def.flexible else 0)
    if flexible:
        return 1
    return 2 if type_ == "string" else 4


def _element_min_size(f: _Field, flexible: bool) -> int:
    """Array elements take at least one byte, even structs with no fields."""
    assert f.element is not None  # an array field has its element type (codec._struct_def)
    return max(_min_size(f.element, f.struct, flexible), 1)


class _Writer:
    """Accumulates generated functions and the constants they refer to."""

    def __init__(self, records_view: bool = False) -> None:
        self.records_view = records_view  # see generate()
        self.functions: list[str] = []  # complete top-level definitions, in order
        self.constants: dict[str, object] = {}
        self._structs: dict[str, str] = {}  # format -> constant name
        self._counter = 0

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def constant(self, value: object, prefix: str = "_c") -> str:
        name = self.fresh(prefix)
        self.constants[name] = value
        return name

    def struct(self, codes: str) -> str:
        """The constant name of ``struct.Struct('>' + codes)``, shared within the module."""
        name = self._structs.get(codes)
        if name is None:
            name = self._structs[codes] = self.constant(struct.Struct(">" + codes), "_s")
        return name

    def literal(self, value: object, prefix: str = "_d") -> str:
        """Source for an immutable default: a literal when it reads back equal, else a
        constant."""
        if value is None or isinstance(value, (bool, int, str, bytes)):
            return repr(value)
        return self.constant(value, prefix)


class _Function:
    """The lines of one generated function."""

    def __init__(self, writer: _Writer, header: str) -> None:
        self.w = writer
        self.lines = [header]
        self.splits = False  # an encoder that may split off chunks (see "encoders" below)

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


def _fixed_runs(s: _StructDef) -> list[_Run]:
    """The regular (untagged) fields present in this version, fixed-width neighbours merged:
    ("fixed", codes, [fields]) or ("var", field)."""
    runs: list[_Run] = []
    for f in s.fields:
        if not f.present or f.tag is not None:
            continue
        if f.type in FIXED_CODES:
            if runs and runs[-1][0] == "fixed":
                runs[-1] = ("fixed", runs[-1][1] + FIXED_CODES[f.type], runs[-1][2] + [f])
            else:
                runs.append(("fixed", FIXED_CODES[f.type], [f]))
        else:
            runs.append(("var", f))
    return runs


def _is_mutable_default(f: _Field) -> bool:
    return f.type == "struct" or (f.type == "[]" and f.default() is not None)


# -- decoders --------------------------------------------------------------------------------
#
# Generated decoders take (buf, pos, end); `pos` is the running position. Each emitter leaves
# the decoded value in the variable it is given and `pos` after it.


def _decode_length(
    fn: _Function, d: int, target: str, start: str, flexible: bool, wide: bool
) -> None:
    """Read a length or count into ``target`` (None for null) and advance pos; ``start`` keeps
    the prefix's offset for errors."""
    fn.emit(d, f"{start} = pos")
    if flexible:
        fn.emit(d, "if pos < end and buf[pos] < 0x80:")
        fn.emit(d + 1, f"{target} = buf[pos] - 1")
        fn.emit(d + 1, "pos += 1")
        fn.emit(d, "else:")
        fn.emit(d + 1, f"{target}, pos = _read_uvarint(buf, pos, end)")
        fn.emit(d + 1, f"{target} -= 1")
        fn.emit(d, f"if {target} < 0:")
        fn.emit(d + 1, f"{target} = None")
        return
    size = 4 if wide else 2
    unpack = "_INT32.unpack_from" if wide else "_INT16.unpack_from"
    fn.emit(d, f"if end - pos < {size}:")
    fn.emit(d + 1, 'raise _error("truncated length", pos)')
    fn.emit(d, f"{target} = {unpack}(buf, pos)[0]")
    fn.emit(d, f"pos += {size}")
    fn.emit(d, f"if {target} < 0:")
    fn.emit(d + 1, f"if {target} != -1:")
    fn.emit(d + 2, f'raise _error(f"length {{{target}}} is negative", {start})')
    fn.emit(d + 1, f"{target} = None")


def _decode_primitive(
    fn: _Function, d: int, type_: str, nullable: bool, flexible: bool, target: str
) -> None:
    w = fn.w
    if type_ in FIXED_CODES:
        fmt = w.struct(FIXED_CODES[type_])
        size = struct.calcsize(">" + FIXED_CODES[type_])
        fn.emit(d, f"if end - pos < {size}:")
        fn.emit(d + 1, f'raise _error(f"truncated: {size} bytes needed, {{end - pos}} left", pos)')
        fn.emit(d, f"{target} = {fmt}.unpack_from(buf, pos)[0]")
        fn.emit(d, f"pos += {size}")
        return
    if type_ == "uuid":
        fn.emit(d, "if end - pos < 16:")
        fn.emit(d + 1, 'raise _error("truncated uuid", pos)')
        fn.emit(d, f"{target} = UUID(bytes=bytes(buf[pos:pos + 16]))")
        fn.emit(d, "pos += 16")
        return
    what = "string" if type_ == "string" else type_
    n, start = w.fresh("n"), w.fresh("at")
    _decode_length(fn, d, n, start, flexible, type_ != "string")
    fn.emit(d, f"if {n} is None:")
    if nullable:
        fn.emit(d + 1, f"{target} = None")
    else:
        fn.emit(d + 1, f'raise _error("null {what} where it is not nullable", {start})')
    fn.emit(d, "else:")
    fn.emit(d + 1, f"if {n} > end - pos:")
    fn.emit(
        d + 2, f'raise _error(f"{what} of {{{n}}} bytes exceeds the {{end - pos}} left", {start})'
    )
    if type_ == "string":
        fn.emit(d + 1, "try:")
        fn.emit(d + 2, f"{target} = str(buf[pos:pos + {n}], 'utf-8')")
        fn.emit(d + 1, "except UnicodeDecodeError as exc:")
        fn.emit(
            d + 2,
            'raise _error(f"string is not valid UTF-8: {exc.reason}", pos + exc.start) from None',
        )
    elif type_ == "records" and w.records_view:
        fn.emit(d + 1, f"{target} = buf[pos:pos + {n}]")
    else:
        fn.emit(d + 1, f"{target} = bytes(buf[pos:pos + {n}])")
    fn.emit(d + 1, f"pos += {n}")


def _struct(f: _Field) -> _StructDef:
    """The struct of a struct field or an array of structs (codec._struct_def gives them one)."""
    assert f.struct is not None
    return f.struct


def _decode_field(fn: _Function, d: int, f: _Field, flexible: bool, target: str) -> None:
    if f.type == "struct" and f.nullable:
        # Kafka's nullable struct: an int8 marker, -1 for null, then the struct if present
        fn.emit(d, "if end - pos < 1:")
        fn.emit(d + 1, f'raise _error("truncated: no null marker for {f.name}", pos)')
        fn.emit(d, "pos += 1")
        fn.emit(d, "if buf[pos - 1] >= 0x80:")
        fn.emit(d + 1, f"{target} = None")
        fn.emit(d, "else:")
        _decode_struct(fn, d + 1, _struct(f), target)
    elif f.type == "struct":
        _decode_struct(fn, d, _struct(f), target)
    elif f.type == "[]":
        _decode_array(fn, d, f, flexible, target)
    else:
        _decode_primitive(fn, d, f.type, f.nullable, flexible, target)


def _decode_array(fn: _Function, d: int, f: _Field, flexible: bool, target: str) -> None:
    assert f.element is not None  # an array field has its element type (codec._struct_def)
    w = fn.w
    n, start = w.fresh("n"), w.fresh("at")
    element_min = _element_min_size(f, flexible)
    _decode_length(fn, d, n, start, flexible, True)
    fn.emit(d, f"if {n} is None:")
    if f.nullable:
        fn.emit(d + 1, f"{target} = None")
    else:
        fn.emit(d + 1, f'raise _error("null array {f.name} where it is not nullable", {start})')
    fn.emit(d, "else:")
    d += 1
    fn.emit(d, f"if {n} * {element_min} > end - pos:")
    fn.emit(
        d + 1,
        f'raise _error(f"array {f.name} of {{{n}}} elements (at least {element_min} '
        f'bytes each) cannot fit in the {{end - pos}} bytes left", {start})',
    )
    if f.element in FIXED_CODES:
        # A primitive array (replicas, isr): one pass of iter_unpack over exactly its bytes.
        fmt = w.struct(FIXED_CODES[f.element])
        x = w.fresh("x")
        fn.emit(
            d,
            f"{target} = [{x} for ({x},) in {fmt}.iter_unpack(buf[pos:pos + {n} * {element_min}])]",
        )
        fn.emit(d, f"pos += {n} * {element_min}")
        return
    fixed_struct = _all_fixed(_struct(f)) if f.element == "struct" else None
    append, item = w.fresh("append"), w.fresh("item")
    fn.emit(d, f"{target} = []")
    fn.emit(d, f"{append} = {target}.append")
    if fixed_struct is not None:
        # Structs of fixed-width fields only (fetch partitions before v12): the count was
        # checked against exactly n * size bytes, so iter_unpack walks them without checks.
        codes, fields = fixed_struct
        fmt = w.struct(codes)
        values = [w.fresh("v") for _ in fields]
        fn.emit(
            d, f"for {', '.join(values)}, in {fmt}.iter_unpack(buf[pos:pos + {n} * {element_min}]):"
        )
        _build_body(fn, d + 1, _struct(f), list(zip(fields, values)), item)
        fn.emit(d + 1, f"{append}({item})")
        fn.emit(d, f"pos += {n} * {element_min}")
        return
    fn.emit(d, f"for _ in range({n}):")
    if f.element == "struct":
        _decode_struct(fn, d + 1, _struct(f), item)
    else:
        _decode_primitive(fn, d + 1, f.element, False, flexible, item)
    fn.emit(d + 1, f"{append}({item})")


def _all_fixed(s: _StructDef) -> tuple[str, list[_Field]] | None:
    """(codes, fields) when every regular field of ``s`` is fixed-width and it has no tagged
    section, else None."""
    runs = _fixed_runs(s)
    if s.flexible or len(runs) != 1 or runs[0][0] != "fixed":
        return None
    return runs[0][1], runs[0][2]


def _build_body(
    fn: _Function, d: int, s: _StructDef, values: list[tuple[_Field, str]], target: str
) -> None:
    """``target`` = a Body of every field of ``s``: the decoded ``values`` ((field, variable)
    pairs), the rest at their defaults (fresh ones for lists and structs)."""
    w = fn.w
    template = w.constant({f.name: f.default() for f in s.fields}, "_t")
    cls = w.constant(s.body_class, "_B")
    fn.emit(d, f"{target} = {cls}({template})")
    decoded = set()
    for f, var in values:
        fn.emit(d, f"{target}[{f.name!r}] = {var}")
        decoded.add(f.name)
    for f in s.fields:
        if f.name not in decoded and _is_mutable_default(f):
            if f.type == "struct":
                fn.emit(d, f"{target}[{f.name!r}] = {w.constant(f.default, '_f')}()")
            else:
                fn.emit(d, f"{target}[{f.name!r}] = []")


def _decode_struct(fn: _Function, d: int, s: _StructDef, target: str) -> None:
    w = fn.w
    values: list[tuple[_Field, str]] = []
    for run in _fixed_runs(s):
        if run[0] == "fixed":
            _, codes, fields = run
            fmt = w.struct(codes)
            size = struct.calcsize(">" + codes)
            names = ", ".join(f.name for f in fields)
            variables = [w.fresh("v") for _ in fields]
            fn.emit(d, f"if end - pos < {size}:")
            fn.emit(
                d + 1,
                f'raise _error(f"truncated: {size} bytes needed for {names}, '
                f'{{end - pos}} left", pos)',
            )
            fn.emit(d, f"{', '.join(variables)}, = {fmt}.unpack_from(buf, pos)")
            fn.emit(d, f"pos += {size}")
            values.extend(zip(fields, variables))
        else:
            f = run[1]
            var = w.fresh("v")
            _decode_field(fn, d, f, s.flexible, var)
            values.append((f, var))
    _build_body(fn, d, s, values, target)
    if s.flexible:
        tagged = _tagged_decoders(w, s)
        fn.emit(d, "if pos < end and buf[pos] == 0:")
        fn.emit(d + 1, "pos += 1")
        fn.emit(d, "else:")
        fn.emit(d + 1, f"pos = _decode_tagged(buf, pos, end, {tagged}, {target})")


def _tagged_decoders(w: _Writer, s: _StructDef) -> str:
    """The constant name of ``{tag: (field name, decoder)}`` for ``s``'s tagged fields, each
    decoder a generated ``(buf, pos, end) -> (value, pos)`` function."""
    entries = []
    for f in s.fields:
        if f.present and f.tag is not None:
            name = w.fresh(f"decode_{f.name}_")
            fn = _Function(w, f"def {name}(buf, pos, end):")
            _decode_field(fn, 1, f, s.flexible, "value")
            fn.emit(1, "return value, pos")
            w.functions.append(fn.source())
            entries.append(f"{f.tag}: ({f.name!r}, {name})")
    table = w.fresh("_tags")
    w.functions.append(f"{table} = {{{', '.join(entries)}}}\n")
    return table


# -- encoders --------------------------------------------------------------------------------
#
# Generated encoders take (value, out=None), append to the bytearray `out` (a fresh one when
# None) and return (chunks, total length): the bytes, and in their place each records value
# split off as a chunk of its own (a FileRegion, or bytes of SEPARATE_CHUNK or more, passed
# through uncopied), in wire order; the first chunk is always bytes. Split chunks collect in two
# locals (split_chunks, split_size) until the end. Each emitter encodes the value held in the
# variable it is given.


def _encode_length(fn: _Function, d: int, n: str, flexible: bool, wide: bool) -> None:
    """Write the non-null length or count ``n`` (a variable or a cheap expression)."""
    if flexible:
        fn.emit(d, f"if {n} < 0x7F:")
        fn.emit(d + 1, f"out.append({n} + 1)")
        fn.emit(d, "else:")
        fn.emit(d + 1, f"_write_uvarint({n} + 1, out)")
    else:
        fn.emit(d, f"out += {'_INT32' if wide else '_INT16'}.pack({n})")


def _encode_null(fn: _Function, d: int, flexible: bool, wide: bool) -> None:
    if flexible:
        fn.emit(d, "out.append(0)")
    else:
        fn.emit(d, f"out += {_NULL_LENGTH[wide]!r}")


def _split(fn: _Function, d: int, region: str, size: str) -> None:
    """Close the bytes so far as a chunk and add ``region`` (bytes or FileRegion) after it."""
    fn.splits = True
    fn.emit(d, f"split_chunks += (bytes(out), {region})")
    fn.emit(d, f"split_size += len(out) + {size}")
    fn.emit(d, "del out[:]")


def _encode_primitive(
    fn: _Function, d: int, type_: str, nullable: bool, flexible: bool, name: str, var: str
) -> None:
    w = fn.w
    if type_ in FIXED_CODES:
        fn.emit(d, f"out += {w.struct(FIXED_CODES[type_])}.pack({var})")
        return
    if type_ == "uuid":
        fn.emit(d, f"out += ({var} or _ZERO_UUID).bytes")
        return
    wide = type_ != "string"
    if type_ != "string":
        # Plain bytes first: the common case, and none of the branches below takes them.
        fn.emit(d, f"if {var}.__class__ is bytes:")
        _encode_data(fn, d + 1, type_, flexible, name, var, True)
        fn.emit(d, f"elif {var} is None:")
    else:
        # Strings seen before (topic names, hosts, ids) come prefixed from a cache.
        cache = "_COMPACT_STRINGS" if flexible else "_STRINGS"
        prefixed = w.fresh("prefixed")
        fn.emit(d, f"if {var}.__class__ is str and ({prefixed} := {cache}.get({var})) is not None:")
        fn.emit(d + 1, f"out += {prefixed}")
        fn.emit(d, f"elif {var} is None:")
    if nullable:
        _encode_null(fn, d + 1, flexible, wide)
    else:
        fn.emit(d + 1, f'raise FieldError("None given for {name}, which is not nullable here")')
    if type_ == "string":
        limit = 0x7FFFFFFF if flexible else 0x7FFF
        data, n = w.fresh("data"), w.fresh("n")
        fn.emit(d, f"elif isinstance({var}, str):")
        fn.emit(d + 1, f"{data} = {var}.encode('utf-8')")
        fn.emit(d + 1, f"{n} = len({data})")
        fn.emit(d + 1, f"if {n} > {limit}:")
        fn.emit(d + 2, f'raise FieldError(f"{name} of {{{n}}} bytes exceeds {limit}")')
        _encode_length(fn, d + 1, n, flexible, wide)
        fn.emit(d + 1, f"out += {data}")
        fn.emit(d + 1, f"if {n} <= {CACHED_STRING_BYTES} and {var}.__class__ is str:")
        fn.emit(
            d + 2,
            f"_remember_string({'_COMPACT_STRINGS' if flexible else '_STRINGS'}, "
            f"{var}, {n}, {data})",
        )
        fn.emit(d, "else:")
        fn.emit(d + 1, f'raise FieldError(f"{name} needs str, got {{type({var}).__name__}}")')
        return
    if type_ == "records":
        n = w.fresh("n")
        fn.emit(d, f"elif isinstance({var}, FileRegion):")
        fn.emit(d + 1, f"{n} = {var}.length")
        _encode_length(fn, d + 1, n, flexible, wide)
        _split(fn, d + 1, var, n)
    fn.emit(d, f"elif isinstance({var}, (bytes, bytearray, memoryview)):")
    fn.emit(d + 1, f"if isinstance({var}, memoryview):")
    fn.emit(d + 2, f"{var} = {var}.cast('B')")
    _encode_data(fn, d + 1, type_, flexible, name, var, False)
    fn.emit(d, "else:")
    fn.emit(d + 1, f'raise FieldError(f"{name} needs bytes, got {{type({var}).__name__}}")')


def _encode_data(
    fn: _Function, d: int, type_: str, flexible: bool, name: str, var: str, exact_bytes: bool
) -> None:
    """Write the bytes-like ``var`` (bytes, bytearray or a byte-format memoryview) with its
    length; ``exact_bytes`` when it is known to be of class bytes."""
    n = fn.w.fresh("n")
    fn.emit(d, f"{n} = len({var})")
    fn.emit(d, f"if {n} > 0x7FFFFFFF:")
    fn.emit(d + 1, f'raise FieldError(f"{name} of {{{n}}} bytes exceeds 2147483647")')
    _encode_length(fn, d, n, flexible, True)
    if type_ == "records":
        # Large record data stays a chunk of its own: bytes are passed through uncopied.
        fn.emit(d, f"if {n} >= {SEPARATE_CHUNK}:")
        _split(fn, d + 1, var if exact_bytes else f"bytes({var})", n)
        fn.emit(d, "else:")
        fn.emit(d + 1, f"out += {var}")
    else:
        fn.emit(d, f"out += {var}")


def _encode_field(fn: _Function, d: int, f: _Field, flexible: bool, var: str) -> None:
    if f.type == "struct" and f.nullable:
        fn.emit(d, f"if {var} is None:")
        fn.emit(d + 1, 'out += b"\\xff"')
        fn.emit(d, "else:")
        fn.emit(d + 1, 'out += b"\\x01"')
        _encode_struct(fn, d + 1, _struct(f), var)
    elif f.type == "struct":
        _encode_struct(fn, d, _struct(f), var)
    elif f.type == "[]":
        _encode_array_count(fn, d, f, flexible, var)
        _encode_array_items(fn, d, f, flexible, var)
    else:
        _encode_primitive(fn, d, f.type, f.nullable, flexible, f.name, var)


def _encode_array_count(fn: _Function, d: int, f: _Field, flexible: bool, var: str) -> None:
    """Write the count (or null) of array ``var``, leaving in ``var`` a sequence to iterate:
    a null array becomes ()."""
    fn.emit(d, f"if {var}.__class__ is list:")
    _encode_length(fn, d + 1, f"len({var})", flexible, True)
    fn.emit(d, f"elif {var} is None:")
    if f.nullable:
        _encode_null(fn, d + 1, flexible, True)
        fn.emit(d + 1, f"{var} = ()")
    else:
        fn.emit(
            d + 1, f'raise FieldError("None given for array {f.name}, which is not nullable here")'
        )
    fn.emit(d, "else:")
    fn.emit(d + 1, f"if not isinstance({var}, tuple):")
    fn.emit(d + 2, f"{var} = list({var})")
    _encode_length(fn, d + 1, f"len({var})", flexible, True)


def _encode_array_items(fn: _Function, d: int, f: _Field, flexible: bool, var: str) -> None:
    assert f.element is not None  # an array field has its element type (codec._struct_def)
    item = fn.w.fresh("item")
    fn.emit(d, f"for {item} in {var}:")
    if f.element == "struct":
        _encode_struct(fn, d + 1, _struct(f), item)
    else:
        _encode_primitive(fn, d + 1, f.element, False, flexible, f.name, item)


def _encode_struct(fn: _Function, d: int, s: _StructDef, var: str) -> None:
    w = fn.w
    regular = [f for f in s.fields if f.present and f.tag is None]
    values = {f.name: w.fresh("v") for f in regular}
    _lookup_fields(fn, d, s, var, regular, values)
    runs = _fixed_runs(s)
    for i, run in enumerate(runs):
        if run[0] == "var":
            if i and runs[i - 1][0] == "fixed" and _joins_run(run[1], s.flexible):
                continue  # its length went out with the run before it
            _encode_field(fn, d, run[1], s.flexible, values[run[1].name])
            continue
        _, codes, fields = run
        args = ", ".join(values[f.name] for f in fields)
        following = runs[i + 1][1] if i + 1 < len(runs) else None
        # _fixed_runs merges neighbouring fixed fields: a "var" run follows a "fixed" one.
        assert not isinstance(following, str)
        if following is None or not _joins_run(following, s.flexible):
            fn.emit(d, f"out += {w.struct(codes)}.pack({args})")
        elif following.type == "[]":
            _encode_run_and_array(fn, d, codes, args, following, values[following.name])
        else:
            _encode_run_and_data(fn, d, codes, args, following, values[following.name])
    if s.flexible:
        tagged = [f for f in s.fields if f.present and f.tag is not None]
        if tagged:
            fn.emit(d, f"_encode_tagged({var}.get, {_tagged_encoders(w, s, tagged)}, out)")
        else:
            fn.emit(d, "out.append(0)")


def _lookup_fields(
    fn: _Function, d: int, s: _StructDef, var: str, regular: list[_Field], values: dict[str, str]
) -> None:
    """Refuse unknown keys in the struct ``var``, then fetch its regular fields into
    ``values`` (missing ones as their defaults).

    A plain dict holding exactly this version's regular fields (the usual case: what handlers
    build) is read with subscripts and needs no key check: having all of them and nothing
    else, it has no unknown key. Anything else takes the full check and ``get``."""
    if not regular:
        _lookup_fields_checked(fn, d, s, var, regular, values)
        return
    fn.emit(d, f"if {var}.__class__ is dict and len({var}) == {len(regular)}:")
    fn.emit(d + 1, "try:")
    for f in regular:
        fn.emit(d + 2, f"{values[f.name]} = {var}[{f.name!r}]")
    fn.emit(d + 1, "except KeyError:")
    _lookup_fields_checked(fn, d + 2, s, var, regular, values)
    fn.emit(d, "else:")
    _lookup_fields_checked(fn, d + 1, s, var, regular, values)


def _lookup_fields_checked(
    fn: _Function, d: int, s: _StructDef, var: str, regular: list[_Field], values: dict[str, str]
) -> None:
    w = fn.w
    known = w.constant(frozenset(f.name for f in s.fields), "_known")
    fn.emit(d, f"if not {known}.issuperset({var}.keys()):")
    fn.emit(d + 1, f"raise _unknown_fields({var}, {known})")
    for f in regular:
        fn.emit(d, f"{values[f.name]} = {var}.get({f.name!r}, {_encode_default(w, f)})")


def _encode_default(w: _Writer, f: _Field) -> str:
    """Source for the value a missing field encodes as (encoding only reads it, so one list
    or struct default serves every call)."""
    if _is_mutable_default(f):
        return w.constant(f.default(), "_d")
    return w.literal(f.default())


def _joins_run(f: _Field, flexible: bool) -> bool:
    """Whether field ``f``, right after a run of fixed fields, has its int32 length or count
    packed with the run (a partition header and its records, a topic's fields and its
    partitions: one pack instead of two)."""
    return not flexible and f.type in ("bytes", "records", "[]")


def _encode_run_and_data(
    fn: _Function, d: int, codes: str, args: str, f: _Field, value: str
) -> None:
    """A fixed run followed by bytes field ``f`` (in ``value``): when it holds a FileRegion
    (records only: what fetch responses carry) or plain bytes, its length joins the run's
    pack; anything else takes the general path. Nothing before the pack can fail, so errors
    come in the same order."""
    w = fn.w
    n = w.fresh("n")
    joined = w.struct(codes + "i")
    keyword = "if"
    if f.type == "records":
        fn.emit(d, f"if {value}.__class__ is FileRegion:")
        fn.emit(d + 1, f"out += {joined}.pack({args}, ({n} := {value}.length))")
        _split(fn, d + 1, value, n)
        keyword = "elif"
    fn.emit(d, f"{keyword} {value}.__class__ is bytes and ({n} := len({value})) <= 0x7FFFFFFF:")
    fn.emit(d + 1, f"out += {joined}.pack({args}, {n})")
    if f.type == "records":
        fn.emit(d + 1, f"if {n} >= {SEPARATE_CHUNK}:")
        _split(fn, d + 2, value, n)
        fn.emit(d + 1, "else:")
        fn.emit(d + 2, f"out += {value}")
    else:
        fn.emit(d + 1, f"out += {value}")
    fn.emit(d, "else:")
    fn.emit(d + 1, f"out += {w.struct(codes)}.pack({args})")
    _encode_primitive(fn, d + 1, f.type, f.nullable, False, f.name, value)


def _encode_run_and_array(
    fn: _Function, d: int, codes: str, args: str, f: _Field, value: str
) -> None:
    """A fixed run followed by array ``f`` (in ``value``): a list's count joins the run's
    pack, anything else takes the general path; then the elements."""
    fn.emit(d, f"if {value}.__class__ is list:")
    fn.emit(d + 1, f"out += {fn.w.struct(codes + 'i')}.pack({args}, len({value}))")
    fn.emit(d, "else:")
    fn.emit(d + 1, f"out += {fn.w.struct(codes)}.pack({args})")
    _encode_array_count(fn, d + 1, f, False, value)
    _encode_array_items(fn, d, f, False, value)


def _tagged_encoders(w: _Writer, s: _StructDef, tagged: list[_Field]) -> str:
    """The constant name of ``[(tag, field name, encoder, default factory)]`` sorted by tag,
    each encoder a generated ``(value, out=None) -> (chunks, total)`` function."""
    entries = []
    for f in sorted(tagged, key=_tag):
        name = w.fresh(f"encode_{f.name}_")
        fn = _Function(w, f"def {name}(value, out=None):")
        _encode_field(fn, 1, f, s.flexible, "value")
        w.functions.append(_encoder_source(fn))
        entries.append(f"({f.tag}, {f.name!r}, {name}, {w.constant(f.default, '_f')})")
    table = w.fresh("_tags")
    w.functions.append(f"{table} = [{', '.join(entries)}]\n")
    return table


def _tag(f: _Field) -> int:
    """The tag of a field tagged at this version."""
    assert f.tag is not None
    return f.tag


def _encoder_source(fn: _Function) -> str:
    """An encoder's body wrapped in its prologue (the buffer, the split locals) and its
    epilogue (the chunks and their total)."""
    prologue = ["    if out is None:", "        out = bytearray()"]
    if fn.splits:
        prologue += ["    split_chunks = []", "    split_size = 0"]
        fn.emit(1, "if split_chunks:")
        fn.emit(2, "if out:")
        fn.emit(3, "split_chunks.append(bytes(out))")
        fn.emit(3, "split_size += len(out)")
        fn.emit(2, "return split_chunks, split_size")
    fn.emit(1, "return [bytes(out)], len(out)")
    fn.lines[1:1] = prologue
    return fn.source()


# -- modules ---------------------------------------------------------------------------------


def generate(s: _StructDef, records_view: bool = False) -> tuple[str, dict[str, object]]:
    """Source defining ``decode(buf, pos, end) -> (Body, pos)`` and ``encode(value, out=None)
    -> (chunks, total)`` for the struct tree ``s`` (a message at one version), and the
    constants they refer to. With ``records_view`` a records field decodes to a slice of
    ``buf`` (a memoryview: no copy), which stays valid only while ``buf``'s bytes are not
    changed: the server decodes requests so (a 30 MB Produce is not copied on the event loop)."""
    w = _Writer(records_view)
    decode = _Function(w, "def decode(buf, pos, end):")
    _decode_struct(decode, 1, s, "body")
    decode.emit(1, "return body, pos")
    encode = _Function(w, "def encode(value, out=None):")
    _encode_struct(encode, 1, s, "value")
    return "\n".join(w.functions + [decode.source(), _encoder_source(encode)]), w.constants
