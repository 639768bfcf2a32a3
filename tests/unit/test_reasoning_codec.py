"""The reasoning signature codec: signatures the proxy issues decode back to the text (protocols.md §6)."""

from __future__ import annotations

import base64
import binascii

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_jobs.proxy import reasoning

pytestmark = pytest.mark.unit


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=500))
def test_decode_inverts_encode(text: str) -> None:
    assert reasoning.decode(reasoning.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_signature_is_standard_base64(text: str) -> None:
    signature = reasoning.encode(text)
    assert signature.isascii()
    raw = base64.b64decode(signature, validate=True)  # raises on a non-alphabet character or bad padding
    assert base64.b64encode(raw).decode("ascii") == signature  # canonical, padded, no url-safe chars
    assert "-" not in signature and "_" not in signature


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.text(max_size=80), st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
                       st.none(), st.integers(), st.booleans(), st.lists(st.text(max_size=3), max_size=2)))
def test_decode_never_raises_and_rejects_foreign(value) -> None:
    assert reasoning.decode(value) is None


@pytest.mark.parametrize("foreign", [
    "", "skip_thought_signature_validator", "sg_polar_" + "A" * 43, "polar:aGVsbG8=",
    "EqQBCkgIBxABGAIiQH1ARndO", "ErUBCkYIBBgCIkB==", "Zm9v", "UEpSMQ==",  # "PJR1" with no zlib body
    base64.b64encode(b"PJR1" + b"not zlib").decode(), "ü" * 8,
    base64.b64encode(b"PJR1" + __import__("zlib").compress(b"\xff\xfe")).decode(),  # not UTF-8 inside
])
def test_foreign_signatures_decode_to_none(foreign: str) -> None:
    assert reasoning.decode(foreign) is None


def test_truncated_signature_is_none() -> None:
    signature = reasoning.encode("a long enough piece of reasoning " * 4)
    for cut in (1, 4, len(signature) // 2):
        try:
            base64.b64decode(signature[:-cut], validate=True)
        except binascii.Error:
            pass
        assert reasoning.decode(signature[:-cut]) is None
