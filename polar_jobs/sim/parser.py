"""Split sampled text the way vLLM's `qwen3` reasoning parser and `qwen3_coder` tool parser do.

Pure functions. Spans (character offsets into the parsed text) are kept so the
streaming encoder can tell which sampled tokens belong to which field.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

THINK_START = "<think>"
THINK_END = "</think>"
TOOL_CALL_START = "<tool_call>"
FUNCTION_PREFIX = "<function="

TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
FUNCTION_RE = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
PARAMETER_RE = re.compile(
    r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL
)
STRING_TYPES = {"string", "str", "text", "varchar", "char", "enum"}


@dataclass(frozen=True)
class ParsedOutput:
    """What the OpenAI-shaped message carries, plus where each part sits in the text."""

    reasoning: str | None
    content: str | None
    tool_calls: list[dict] = field(default_factory=list)
    reasoning_span: tuple[int, int] | None = None
    content_span: tuple[int, int] | None = None
    tool_call_ends: list[int] = field(default_factory=list)


def split_reasoning(text: str, enable_thinking: bool = True) -> tuple[str | None, int, int]:
    """(reasoning, reasoning_start, content_start) for `text`.

    `<think>` is stripped when present. Text before `</think>` is reasoning.
    Without `</think>`: an opened think block (truncated) is all reasoning;
    otherwise, as with the Qwen3 generation prompt used here, all is content.
    """
    opened = text.find(THINK_START)
    start = opened + len(THINK_START) if opened >= 0 else 0
    end = text.find(THINK_END, start)
    if end >= 0:
        return text[start:end], start, end + len(THINK_END)
    if opened >= 0 and enable_thinking:
        tool_at = text.find(TOOL_CALL_START, start)
        if tool_at >= 0 and text[tool_at + len(TOOL_CALL_START):].lstrip().startswith(FUNCTION_PREFIX):
            return text[start:tool_at] or None, start, tool_at
        return text[start:], start, len(text)
    return None, 0, 0


def tool_properties(tools: list | None, name: str) -> dict:
    """The JSON-schema `properties` of the offered tool called `name`."""
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters") or {}
            props = params.get("properties") if isinstance(params, dict) else None
            return props if isinstance(props, dict) else {}
    return {}


def schema_type(schema: Any) -> tuple[str, bool]:
    """(primary type, allows null) of one property schema."""
    if isinstance(schema, dict) and "type" in schema:
        kind = str(schema["type"]).strip().lower()
        return kind, kind == "null"
    if isinstance(schema, dict) and "anyOf" in schema:
        kinds = [str(o["type"]).strip().lower() for o in schema["anyOf"] if isinstance(o, dict) and "type" in o]
        non_null = [k for k in kinds if k != "null"]
        return (non_null[0] if non_null else "string"), "null" in kinds
    return "string", False


def convert_param(value: str, name: str, props: dict) -> Any:
    """Type a raw parameter string from the tool schema, as qwen3_coder does."""
    if name not in props:
        return value
    kind, nullable = schema_type(props[name])
    if nullable and value.lower() in ("null", "none"):
        return None
    if kind in STRING_TYPES:
        return value
    if value.lower() in ("null", "none"):
        return None
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
            return number if number - int(number) != 0 else int(number)
        except (ValueError, OverflowError):
            return value
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


def parse_function(body: str, tools: list | None) -> dict | None:
    """{name, arguments} from the text after `<function=`."""
    if ">" not in body:
        return None
    name = body[: body.index(">")]
    props = tool_properties(tools, name)
    args: dict[str, Any] = {}
    for match in PARAMETER_RE.findall(body):
        if ">" not in match:
            continue
        key, value = match[: match.index(">")], match[match.index(">") + 1 :]
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        args[key] = convert_param(value, key, props)
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}


def extract_tool_calls(text: str, tools: list | None = None) -> tuple[str | None, list[dict], list[int]]:
    """(content, tool calls, end offset of each call) for the post-reasoning text."""
    if TOOL_CALL_START not in text:
        return (text or None), [], []
    calls, ends = [], []
    blocks = list(TOOL_CALL_RE.finditer(text))
    for block in blocks:
        inner = block.group(1) if block.group(1) is not None else block.group(2)
        for fn in FUNCTION_RE.findall(inner):
            call = parse_function(fn[0] or fn[1], tools)
            if call is not None:
                calls.append(call)
                ends.append(block.end())
    if not calls:
        return (text or None), [], []
    cut = text.find(TOOL_CALL_START)
    return (text[:cut] or None), calls, ends


def parse_output(text: str, tools: list | None = None, enable_thinking: bool = True) -> ParsedOutput:
    """Reasoning, content and tool calls of one sampled text (stop token excluded)."""
    reasoning, r_start, c_start = split_reasoning(text, enable_thinking)
    rest = text[c_start:]
    content, calls, ends = extract_tool_calls(rest, tools)
    return ParsedOutput(
        reasoning=reasoning,
        content=content,
        tool_calls=calls,
        reasoning_span=(r_start, r_start + len(reasoning)) if reasoning is not None else None,
        content_span=(c_start, c_start + len(content)) if content is not None else None,
        tool_call_ends=[c_start + end for end in ends],
    )
