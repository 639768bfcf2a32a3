"""The simulator's port of vLLM's qwen3 reasoning and qwen3_coder tool parsers."""

import json

import pytest

from polar_jobs.sim.parser import parse_output

pytestmark = pytest.mark.unit

TOOLS = [{
    "type": "function",
    "function": {"name": "run", "parameters": {"type": "object", "properties": {
        "cmd": {"type": "string"}, "n": {"type": "integer"}, "x": {"type": "number"},
        "ok": {"type": "boolean"}, "cfg": {"type": "object"}, "items": {"type": "array"},
        "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    }}},
}]


def test_plain_text_is_content():
    out = parse_output("Hello there")
    assert (out.reasoning, out.content, out.tool_calls) == (None, "Hello there", [])


def test_think_block_splits_reasoning_and_content_verbatim():
    out = parse_output("<think>\nplan\n</think>\n\nAnswer")
    assert out.reasoning == "\nplan\n"
    assert out.content == "\n\nAnswer"


def test_reasoning_without_content_gives_none_content():
    out = parse_output("<think>\nonly\n</think>")
    assert out.reasoning == "\nonly\n" and out.content is None


def test_truncated_think_block_is_all_reasoning():
    assert parse_output("<think>\nhalf a thou").reasoning == "\nhalf a thou"
    assert parse_output("<think>\nhalf a thou").content is None


def test_closing_tag_without_opening_tag():
    out = parse_output("reasoned\n</think>\n\nok")
    assert out.reasoning == "reasoned\n" and out.content == "\n\nok"


def test_tool_call_values_typed_from_schema():
    text = (
        "Running it.\n\n<tool_call>\n<function=run>\n"
        "<parameter=cmd>\nls -la\n</parameter>\n<parameter=n>\n3\n</parameter>\n"
        "<parameter=x>\n2.5\n</parameter>\n<parameter=ok>\nTrue\n</parameter>\n"
        '<parameter=cfg>\n{"a": 1}\n</parameter>\n<parameter=items>\n[1, "b"]\n</parameter>\n'
        "<parameter=maybe>\nnull\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    out = parse_output(text, TOOLS)
    assert out.content == "Running it.\n\n"
    assert [c["name"] for c in out.tool_calls] == ["run"]
    assert json.loads(out.tool_calls[0]["arguments"]) == {
        "cmd": "ls -la", "n": 3, "x": 2.5, "ok": True, "cfg": {"a": 1}, "items": [1, "b"], "maybe": None,
    }


def test_without_schema_values_stay_strings():
    text = "<tool_call>\n<function=other>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>"
    out = parse_output(text, TOOLS)
    assert out.content is None
    assert json.loads(out.tool_calls[0]["arguments"]) == {"n": "3"}


def test_multiline_value_keeps_inner_newlines():
    text = "<tool_call>\n<function=run>\n<parameter=cmd>\n\nline1\nline2\n\n</parameter>\n</function>\n</tool_call>"
    assert json.loads(parse_output(text, TOOLS).tool_calls[0]["arguments"]) == {"cmd": "\nline1\nline2\n"}


def test_parallel_calls_and_reasoning():
    text = (
        "<think>\nboth\n</think>\n\n"
        "<tool_call>\n<function=a>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=b>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>"
    )
    out = parse_output(text)
    assert out.reasoning == "\nboth\n"
    assert out.content == "\n\n"
    assert [(c["name"], json.loads(c["arguments"])) for c in out.tool_calls] == [("a", {}), ("b", {"k": "v"})]
    assert out.tool_call_ends[-1] == len(text)


def test_unterminated_tool_call_still_parses():
    out = parse_output("<tool_call>\n<function=run>\n<parameter=cmd>\necho", TOOLS)
    assert json.loads(out.tool_calls[0]["arguments"]) == {"cmd": "echo"}


def test_tool_call_tag_without_function_is_content():
    out = parse_output("see <tool_call> in docs")
    assert out.tool_calls == [] and out.content == "see <tool_call> in docs"


def test_thinking_disabled_never_invents_reasoning():
    out = parse_output("<think>\nunterminated", enable_thinking=False)
    assert out.reasoning is None and out.content == "<think>\nunterminated"


def test_spans_point_into_the_text():
    text = "<think>\nR\n</think>\n\nC"
    out = parse_output(text)
    assert text[slice(*out.reasoning_span)] == out.reasoning
    assert text[slice(*out.content_span)] == out.content
