"""Delta encoding of captured token arrays and byte strings: exact round trips."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.store import delta

pytestmark = pytest.mark.unit

EXAMPLES = settings(max_examples=300, deadline=None)


def _naive_prefix(a: bytes, b: bytes) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def _naive_suffix(a: bytes, b: bytes, limit: int) -> int:
    n = 0
    while n < min(len(a), len(b), limit) and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


small_bytes = st.binary(max_size=64)
# pairs that share structure, like successive prompts of one agent session
related = st.tuples(small_bytes, small_bytes, small_bytes, small_bytes).map(
    lambda t: (t[0] + t[1] + t[3], t[0] + t[2] + t[3]))
pairs = st.one_of(st.tuples(small_bytes, small_bytes), related,
                  small_bytes.map(lambda a: (a, a)), st.tuples(small_bytes, small_bytes).map(lambda t: (t[0], t[0] + t[1])),
                  st.tuples(small_bytes, small_bytes).map(lambda t: (t[0] + t[1], t[0])))


@EXAMPLES
@given(pair=pairs)
def test_apply_inverts_diff(pair) -> None:
    base, new = pair
    d = delta.diff_bytes(base, new)
    assert delta.apply_bytes(base, d) == new
    assert d.prefix + len(d.middle) + d.suffix == len(new)
    assert d.prefix == _naive_prefix(base, new)
    assert d.prefix + d.suffix <= min(len(base), len(new))


@EXAMPLES
@given(pair=pairs)
def test_common_prefix_and_suffix_match_naive_loops(pair) -> None:
    a, b = pair
    assert delta.common_prefix_len(a, b) == _naive_prefix(a, b)
    for limit in (0, 1, 3, len(a), len(b) + 5):
        assert delta.common_suffix_len(a, b, limit) == _naive_suffix(a, b, limit)


@EXAMPLES
@given(ids=st.lists(st.integers(0, 2**32 - 1), max_size=200))
def test_ids_round_trip(ids: list[int]) -> None:
    packed = delta.pack_ids(ids)
    assert len(packed) == 4 * len(ids)
    assert packed == struct.pack(f"<{len(ids)}I", *ids)  # little-endian uint32, by definition
    assert delta.unpack_ids(packed) == ids


@EXAMPLES
@given(a=st.lists(st.integers(0, 2**32 - 1), max_size=50), b=st.lists(st.integers(0, 2**32 - 1), max_size=50))
def test_common_token_prefix_counts_whole_tokens(a: list[int], b: list[int]) -> None:
    assert delta.common_token_prefix(delta.pack_ids(a), delta.pack_ids(b)) == _naive_prefix(a, b)


@pytest.mark.parametrize("bad", [-1, 2**32])
def test_ids_out_of_range_refused(bad: int) -> None:
    with pytest.raises(OverflowError):
        delta.pack_ids([bad])


floats = st.one_of(st.floats(allow_nan=False), st.sampled_from(
    [-math.inf, math.inf, 0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
     -0.1, 0.1 + 0.2, -1e-45, -9.999999747378752e-06]))


@EXAMPLES
@given(values=st.lists(floats, max_size=100))
def test_floats_round_trip_exactly(values: list[float]) -> None:
    packed = delta.pack_floats(values)
    assert packed == struct.pack(f"<{len(values)}d", *values)  # little-endian float64
    out = delta.unpack_floats(packed)
    assert [struct.pack("<d", v) for v in out] == [struct.pack("<d", v) for v in values]  # bit-exact, -0.0 too


def test_nan_survives() -> None:
    assert math.isnan(delta.unpack_floats(delta.pack_floats([math.nan]))[0])


@EXAMPLES
@given(data=st.binary(max_size=2000))
def test_compress_round_trip(data: bytes) -> None:
    assert delta.decompress(delta.compress(data)) == data
