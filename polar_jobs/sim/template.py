"""A pure-Python rendering of the Qwen3.5 chat template (Qwen3-Coder XML tool calls).

Mirrors the official `chat_template.jinja` of Qwen/Qwen3.5 as vLLM applies it
(`tojson` = `json.dumps(ensure_ascii=False)`, `|trim` = `str.strip`), except
the generation prompt, which follows Qwen3: `<|im_start|>assistant\\n`, plus an
empty think block when thinking is disabled.
"""

from __future__ import annotations

import json
from typing import Any

VISION_IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
VISION_VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"
GENERATION_PROMPT = "<|im_start|>assistant\n"
EMPTY_THINK = "<think>\n\n</think>\n\n"

TOOLS_HEADER = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
TOOLS_FOOTER = (
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:"
    "\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>"
    "\nvalue_1\n</parameter>\n<parameter=example_parameter_2>"
    "\nThis is the value for the second parameter\nthat can span\nmultiple lines"
    "\n</parameter>\n</function>\n</tool_call>"
    "\n\n<IMPORTANT>\nReminder:"
    "\n- Function calls MUST follow the specified format: an inner <function=...></function>"
    " block must be nested within <tool_call></tool_call> XML tags"
    "\n- Required parameters MUST be specified"
    "\n- You may provide optional reasoning for your function call in natural language"
    " BEFORE the function call, but NOT after"
    "\n- If there is no function call available, answer the question like normal with your"
    " current knowledge and do not tell the user about function calls"
    "\n</IMPORTANT>"
)


class TemplateError(ValueError):
    """The messages cannot be rendered (the real template would raise)."""


def tojson(value: Any) -> str:
    """Jinja `tojson` as transformers defines it."""
    return json.dumps(value, ensure_ascii=False)


def render_content(content: Any, is_system: bool = False) -> str:
    """Text of a message content: a string, None, or a list of parts."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise TemplateError("Unexpected content type.")
    out = []
    for item in content:
        if not isinstance(item, dict):
            raise TemplateError("Unexpected item type in content.")
        kind = item.get("type")
        if "image" in item or "image_url" in item or kind in ("image", "image_url"):
            if is_system:
                raise TemplateError("System message cannot contain images.")
            out.append(VISION_IMAGE)
        elif "video" in item or kind == "video":
            if is_system:
                raise TemplateError("System message cannot contain videos.")
            out.append(VISION_VIDEO)
        elif "text" in item:
            out.append(str(item["text"]))
        else:
            raise TemplateError("Unexpected item type in content.")
    return "".join(out)


def render_system(messages: list[dict], tools: list | None) -> str:
    """The leading system block, with the tool list when tools are offered."""
    first = messages[0]
    system = render_content(first.get("content"), is_system=True).strip() if first.get("role") == "system" else None
    if tools:
        parts = ["<|im_start|>system\n", TOOLS_HEADER]
        parts.extend("\n" + tojson(tool) for tool in tools)
        parts.append(TOOLS_FOOTER)
        if system:
            parts.append("\n\n" + system)
        parts.append("<|im_end|>\n")
        return "".join(parts)
    if system is not None:
        return "<|im_start|>system\n" + system + "<|im_end|>\n"
    return ""


def last_query_index(messages: list[dict]) -> int:
    """Index of the last user message that is not a wrapped tool response."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") != "user":
            continue
        text = render_content(message.get("content")).strip()
        if not (text.startswith("<tool_response>") and text.endswith("</tool_response>")):
            return index
    raise TemplateError("No user query found in messages.")


def call_function(call: Any) -> tuple[str, dict | None]:
    """(name, arguments mapping) of a tool call; vLLM json-decodes string arguments."""
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise TemplateError("Tool call without a function name.")
    name, args = fn["name"], fn.get("arguments")
    if args is None:
        return name, None
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise TemplateError(f"Tool call arguments are not valid JSON: {exc}") from exc
    if not isinstance(args, dict):
        raise TemplateError("Tool call arguments must be a JSON object.")
    return name, args


def param_text(value: Any) -> str:
    """A parameter value: containers as JSON, scalars through Jinja `|string`."""
    if isinstance(value, (dict, list, tuple)):
        return tojson(value)
    return str(value)


def render_tool_calls(calls: list, content: str) -> str:
    """Assistant tool calls in the Qwen3-Coder XML form."""
    out = []
    for position, call in enumerate(calls):
        name, args = call_function(call)
        if position == 0:
            out.append(("\n\n" if content.strip() else "") + "<tool_call>\n<function=" + name + ">\n")
        else:
            out.append("\n<tool_call>\n<function=" + name + ">\n")
        for key, value in (args or {}).items():
            out.append("<parameter=" + str(key) + ">\n" + param_text(value) + "\n</parameter>\n")
        out.append("</function>\n</tool_call>")
    return "".join(out)


def message_reasoning(message: dict, content: str) -> tuple[str, str]:
    """(reasoning, content) of an assistant message; inline think blocks are split out."""
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning")
    if isinstance(reasoning, str):
        return reasoning.strip(), content
    if "</think>" in content:
        head = content.split("</think>")[0]
        reasoning = head.rstrip("\n").split("<think>")[-1].lstrip("\n")
        return reasoning.strip(), content.split("</think>")[-1].lstrip("\n")
    return "", content


def render_assistant(message: dict, content: str, with_think: bool) -> str:
    """One assistant turn; the think block only after the last user query."""
    reasoning, content = message_reasoning(message, content)
    if with_think:
        out = "<|im_start|>assistant\n<think>\n" + reasoning + "\n</think>\n\n" + content
    else:
        out = "<|im_start|>assistant\n" + content
    calls = message.get("tool_calls")
    if calls and isinstance(calls, list):
        out += render_tool_calls(calls, content)
    return out + "<|im_end|>\n"


def render_messages(messages: list[dict], last_query: int) -> str:
    """All turns after the system block."""
    out = []
    count = len(messages)
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TemplateError("Each message must be an object.")
        role = message.get("role")
        content = render_content(message.get("content")).strip()
        if role == "system":
            if index != 0:
                raise TemplateError("System message must be at the beginning.")
        elif role == "user":
            out.append("<|im_start|>user\n" + content + "<|im_end|>\n")
        elif role == "assistant":
            out.append(render_assistant(message, content, index > last_query))
        elif role == "tool":
            if index > 0 and messages[index - 1].get("role") != "tool":
                out.append("<|im_start|>user")
            out.append("\n<tool_response>\n" + content + "\n</tool_response>")
            if index == count - 1 or messages[index + 1].get("role") != "tool":
                out.append("<|im_end|>\n")
        else:
            raise TemplateError("Unexpected message role.")
    return "".join(out)


def continue_final(rendered: str, messages: list[dict]) -> str:
    """Cut the render right after the final message's text (HF `continue_final_message`)."""
    final = messages[-1].get("content")
    if isinstance(final, list):
        texts = [part["text"] for part in final if isinstance(part, dict) and "text" in part]
        if not texts:
            raise TemplateError("continue_final_message is set but the final message has no text.")
        final = texts[-1]
    final = final or ""
    if final.strip() not in rendered:
        raise TemplateError("continue_final_message is set but the final message does not appear in the chat.")
    loc = rendered.rindex(final.strip())
    if rendered[loc : loc + len(final.lstrip())] == final:
        return rendered[: loc + len(final.lstrip())]
    return rendered[: loc + len(final.strip())]


def render_chat(
    messages: list[dict],
    tools: list | None = None,
    add_generation_prompt: bool = True,
    enable_thinking: bool = True,
    continue_final_message: bool = False,
) -> str:
    """The prompt text vLLM would build for these messages and tools."""
    if not isinstance(messages, list) or not messages:
        raise TemplateError("No messages provided.")
    if not all(isinstance(m, dict) for m in messages):
        raise TemplateError("Each message must be an object.")
    if add_generation_prompt and continue_final_message:
        raise TemplateError("continue_final_message and add_generation_prompt cannot both be true.")
    if tools is not None and not isinstance(tools, list):
        raise TemplateError("tools must be a list.")
    rendered = render_system(messages, tools) + render_messages(messages, last_query_index(messages))
    if continue_final_message:
        return continue_final(rendered, messages)
    if add_generation_prompt:
        rendered += GENERATION_PROMPT + ("" if enable_thinking else EMPTY_THINK)
    return rendered
