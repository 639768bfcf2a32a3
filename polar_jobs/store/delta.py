"""Delta encoding for captured data: token arrays and byte strings stored against an earlier one.

Pure functions. A token array is packed as little-endian uint32 (4 bytes a token, not a JSON list);
a prompt is stored as (base, shared prefix length, tail), a byte string as (base, shared prefix
length, shared suffix length, zlib(middle)). Append-only agent histories therefore cost storage
proportional to what each call adds, not to its whole context.
"""

from __future__ import annotations

import sys
import zlib
from array import array
from dataclasses import dataclass

_LITTLE = sys.byteorder == "little"


def pack_ids(ids: list[int]) -> bytes:
    """Token ids as little-endian uint32 bytes."""
    packed = array("I", ids)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def unpack_ids(data: bytes) -> list[int]:
    unpacked = array("I")
    unpacked.frombytes(data)
    if not _LITTLE:
        unpacked.byteswap()
    return unpacked.tolist()


def pack_floats(values: list[float]) -> bytes:
    """Logprobs as little-endian float64 bytes (exact: no rounding of what the engine returned)."""
    packed = array("d", values)
    if not _LITTLE:
        packed.byteswap()
    return packed.tobytes()


def unpack_floats(data: bytes) -> list[float]:
    unpacked = array("d")
    unpacked.frombytes(data)
    if not _LITTLE:
        unpacked.byteswap()
    return unpacked.tolist()


def common_prefix_len(a: bytes, b: bytes) -> int:
    """Length of the longest shared prefix, by binary search over memcmp'd slices (fast in C)."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix_len(a: bytes, b: bytes, limit: int) -> int:
    """Length of the longest shared suffix, at most ``limit`` bytes."""
    lo, hi = 0, min(len(a), len(b), limit)
    if hi and a[len(a) - hi :] == b[len(b) - hi :]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_token_prefix(a_packed: bytes, b_packed: bytes) -> int:
    """Shared prefix of two packed id arrays, in tokens."""
    return common_prefix_len(a_packed, b_packed) // 4


@dataclass(frozen=True)
class ByteDelta:
    """``new == base[:prefix] + middle + base[len(base) - suffix:]``."""

    prefix: int
    suffix: int
    middle: bytes


def diff_bytes(base: bytes, new: bytes) -> ByteDelta:
    prefix = common_prefix_len(base, new)
    suffix = common_suffix_len(base, new, limit=min(len(base), len(new)) - prefix)
    return ByteDelta(prefix, suffix, new[prefix : len(new) - suffix])


def apply_bytes(base: bytes, delta: ByteDelta) -> bytes:
    tail = base[len(base) - delta.suffix :] if delta.suffix else b""
    return base[: delta.prefix] + delta.middle + tail


def compress(data: bytes) -> bytes:
    return zlib.compress(data, 1)


def decompress(data: bytes) -> bytes:
    return zlib.decompress(data)
