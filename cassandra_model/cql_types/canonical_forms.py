"""Canonical serialized forms: one byte string for every class of values that Cassandra compares equal.

Most types compare equal values only when their bytes are equal (``byte_identical``). The others do not,
and a row's clustering must not depend on which spelling a write used: Cassandra keeps one row for
``1.0`` and ``1.00``, and the row's Kafka key, its images and the lake must show one form too. Cassandra
itself shows whichever bytes its memtable or sstable happened to keep (the first write, usually, but
not after compaction or on another replica), so no form is "Cassandra's"; the canonical form is a
documented normal form, chosen to be what a reader expects:

- boolean: ``0x01`` for true (any non-zero byte), ``0x00`` for false;
- varint: the minimal two's-complement bytes (as Java's ``BigInteger.toByteArray``);
- decimal: trailing zeros of the unscaled value stripped (``1.50`` -> ``1.5``, ``1.00`` -> ``1``), and
  an integral value written in plain digits, scale 0 (``1E+2`` -> ``100``) while those are at most
  ``MAX_PLAIN_DIGITS``; zero is ``0`` (scale 0). A larger integral value keeps its exponent, so that
  ``1E+1000000`` stays a few bytes;
- float, double: every NaN is Java's canonical NaN (``0x7fc00000``, ``0x7ff8000000000000``), as
  ``Float.compare`` and ``Double.compare`` treat them all as one; ``-0.0`` and ``0.0`` stay apart (they
  compare unequal);
- frozen list, set, map, vector: each element (key, value) in its canonical form; the order of a
  set's elements and a map's keys does not change, since equal-comparing forms sort alike;
- frozen tuple, UDT: each field in its canonical form, and trailing null fields dropped (a value written
  before ALTER TYPE ADD equals one with the new field null), but at least one field kept: an empty value
  is a different value.

Each function takes a NON-EMPTY serialized value (an empty value is its own class and stays empty) and
returns bytes whose order encoding (``byte_order``) is the input's: a canonical form changes the bytes of
a value, never which values are equal or how they sort. A type's ``canonical_form`` builds its function
from these pieces.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from cassandra_model.cql_types.framing import (
    read_elements,
    read_fields,
    read_pairs,
    read_unsigned_vint,
    sized,
    unsigned_vint,
)
from cassandra_model.errors import ClusteringValueError

CanonicalForm = Callable[[bytes], bytes]

#: an integral decimal is written in plain digits while it has at most this many: 38 is the widest
#: exact decimal of the SQL engines and sinks downstream (Spark, JDBC sinks: DECIMAL(38, 0))
MAX_PLAIN_DIGITS = 38

_I32 = struct.Struct(">i")
_INT32_MIN = -(2**31)


def same(b: bytes) -> bytes:
    """A part whose type is byte-identical inside a value that is not."""
    return b


# ---------------------------------------------------------------------------------------------------------
# native types


def boolean(b: bytes) -> bytes:
    return b"\x01" if b[0] else b"\x00"


def _varint_bytes(value: int) -> bytes:
    """Minimal big-endian two's complement (zero is one 0x00 byte)."""
    size = (value.bit_length() if value >= 0 else (~value).bit_length()) // 8 + 1
    return value.to_bytes(size, "big", signed=True)


def varint(b: bytes) -> bytes:
    return _varint_bytes(int.from_bytes(b, "big", signed=True))


def decimal(b: bytes) -> bytes:
    if len(b) < 4:
        raise ClusteringValueError(f"decimal needs at least 4 bytes, got {len(b)}")
    scale = _I32.unpack_from(b)[0]
    unscaled = int.from_bytes(b[4:], "big", signed=True)
    if unscaled == 0:
        return _I32.pack(0) + b"\x00"
    digits = str(abs(unscaled))
    significant = digits.rstrip("0")
    # the scale stays an int32: a value at its bottom keeps a trailing zero, which every spelling of it
    # reaches in the same way
    strip = min(len(digits) - len(significant), scale - _INT32_MIN)
    if strip:
        unscaled //= 10**strip
        scale -= strip
    if scale < 0 and len(digits) - strip - scale <= MAX_PLAIN_DIGITS:
        unscaled *= 10**-scale
        scale = 0
    return _I32.pack(scale) + _varint_bytes(unscaled)


def floating(size: int) -> CanonicalForm:
    exponent_mask = {4: 0x7F800000, 8: 0x7FF0000000000000}[size]
    fraction_mask = {4: 0x007FFFFF, 8: 0x000FFFFFFFFFFFFF}[size]
    canonical_nan = {4: 0x7FC00000, 8: 0x7FF8000000000000}[size].to_bytes(size, "big")

    def canonical(b: bytes) -> bytes:
        if len(b) != size:
            raise ClusteringValueError(f"a {size}-byte float value has {len(b)} bytes")
        value = int.from_bytes(b, "big")
        if value & exponent_mask == exponent_mask and value & fraction_mask:
            return canonical_nan
        return b

    return canonical


# ---------------------------------------------------------------------------------------------------------
# nested values (elements of frozen collections, tuple and UDT fields)


def _nested(form: CanonicalForm) -> Callable[[bytes | None], bytes | None]:
    """An element inside a frozen value: null and empty stay as they are."""

    def nested(b: bytes | None) -> bytes | None:
        return b if not b else form(b)

    return nested


def _framed(items: Sequence[bytes | None]) -> bytes:
    return b"".join(sized(item) for item in items)


def elements(element: CanonicalForm) -> CanonicalForm:
    """A frozen list or set."""
    nested = _nested(element)

    def canonical(b: bytes) -> bytes:
        items = read_elements(b)
        return len(items).to_bytes(4, "big") + _framed([nested(item) for item in items])

    return canonical


def entries(key: CanonicalForm, value: CanonicalForm) -> CanonicalForm:
    """A frozen map."""
    nested_key = _nested(key)
    nested_value = _nested(value)

    def canonical(b: bytes) -> bytes:
        pairs = read_pairs(b)
        return len(pairs).to_bytes(4, "big") + _framed(
            [part for k, v in pairs for part in (nested_key(k), nested_value(v))]
        )

    return canonical


def fields(types: Sequence[CanonicalForm]) -> CanonicalForm:
    """A frozen tuple or UDT: trailing null fields dropped, at least one field kept."""
    nested = [_nested(t) for t in types]

    def canonical(b: bytes) -> bytes:
        fields = read_fields(b, len(nested), "tuple/UDT", too_many=ClusteringValueError)
        items = [form(item) for form, item in zip(nested, fields, strict=False)]
        while len(items) > 1 and items[-1] is None:
            items.pop()
        return _framed(items)

    return canonical


def vector(element: CanonicalForm, size: int | None, dimension: int) -> CanonicalForm:
    """A vector of ``dimension`` elements, fixed ``size`` bytes each or vint-length-prefixed (None)."""
    nested = _nested(element)

    def canonical(b: bytes) -> bytes:
        if size is not None:
            if len(b) != size * dimension:
                raise ClusteringValueError(f"vector needs {size * dimension} bytes, got {len(b)}")
            return b"".join(element(b[i : i + size]) for i in range(0, len(b), size))
        pos = 0
        parts = []
        for _ in range(dimension):
            length, pos = read_unsigned_vint(b, pos)
            item = nested(b[pos : pos + length]) or b""
            parts.append(unsigned_vint(len(item)) + item)
            pos += length
        return b"".join(parts)

    return canonical
