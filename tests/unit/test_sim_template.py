"""The simulator's Qwen3.5 chat template, checked against hand-written renders."""

import json

import pytest

from polar_jobs.sim.template import TemplateError, render_chat

pytestmark = pytest.mark.unit

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_plain_conversation_with_generation_prompt():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render_chat(messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_thinking_disabled_appends_empty_think_block():
    out = render_chat([{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert out == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_no_generation_prompt():
    out = render_chat([{"role": "user", "content": " Hi \n"}], add_generation_prompt=False)
    assert out == "<|im_start|>user\nHi<|im_end|>\n"


def test_system_not_first_is_rejected():
    messages = [{"role": "user", "content": "Hi"}, {"role": "system", "content": "late"}]
    with pytest.raises(TemplateError, match="System message must be at the beginning."):
        render_chat(messages)


@pytest.mark.parametrize("messages", [
    [{"role": "robot", "content": "x"}, {"role": "user", "content": "Hi"}],
    [],
    [{"role": "assistant", "content": "only me"}],
    [{"role": "user", "content": 5}],
    [{"role": "user", "content": [{"type": "audio"}]}],
])
def test_invalid_messages_raise(messages):
    with pytest.raises(TemplateError):
        render_chat(messages)


def test_tools_go_into_the_system_block_before_the_system_text():
    out = render_chat([{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}], tools=[WEATHER])
    head = "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    assert out.startswith(head + json.dumps(WEATHER, ensure_ascii=False) + "\n</tools>\n\nIf you choose")
    assert "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n" in out
    assert out.endswith("\n</IMPORTANT>\n\nSys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_assistant_tool_call_rendered_as_xml_after_last_query():
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather",
                         "arguments": json.dumps({"city": "Paris", "days": 3, "opts": {"a": [1]}})}}
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check", "tool_calls": [call]},
    ]
    out = render_chat(messages, add_generation_prompt=False)
    assert out == (
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nLet me check\n\n"
        "<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n"
        '<parameter=opts>\n{"a": [1]}\n</parameter>\n'
        "</function>\n</tool_call><|im_end|>\n"
    )


def test_parallel_calls_with_dict_arguments_and_no_content():
    calls = [{"type": "function", "function": {"name": "a", "arguments": {"x": "1"}}},
             {"type": "function", "function": {"name": "b", "arguments": {}}}]
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": calls}]
    out = render_chat(messages, add_generation_prompt=False)
    assert out.endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>"
        "\n<tool_call>\n<function=b>\n</function>\n</tool_call><|im_end|>\n"
    )


def test_consecutive_tool_results_share_one_user_block():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "a", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "r1"},
        {"role": "tool", "tool_call_id": "2", "content": [{"type": "text", "text": "r2"}]},
    ]
    out = render_chat(messages)
    assert out.endswith(
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_reasoning_kept_only_after_last_user_query():
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning": "r1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2", "reasoning_content": "r2"},
    ]
    out = render_chat(messages, add_generation_prompt=False)
    assert out == (
        "<|im_start|>user\nq1<|im_end|>\n"
        "<|im_start|>assistant\na1<|im_end|>\n"
        "<|im_start|>user\nq2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n"
    )


def test_tool_responses_do_not_count_as_user_queries():
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "reasoning": "plan",
         "tool_calls": [{"function": {"name": "ls", "arguments": {}}}]},
        {"role": "tool", "content": "files"},
        {"role": "assistant", "content": "done", "reasoning": "saw files"},
    ]
    out = render_chat(messages, add_generation_prompt=False)
    assert "<|im_start|>assistant\n<think>\nplan\n</think>\n\n<tool_call>" in out
    assert out.endswith("<|im_start|>assistant\n<think>\nsaw files\n</think>\n\ndone<|im_end|>\n")


def test_inline_think_in_content_is_split_out():
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "<think>\nhidden\n</think>\n\nshown"}]
    out = render_chat(messages, add_generation_prompt=False)
    assert out.endswith("<|im_start|>assistant\n<think>\nhidden\n</think>\n\nshown<|im_end|>\n")


def test_image_parts_become_vision_tokens():
    content = [{"type": "text", "text": "See "}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    out = render_chat([{"role": "user", "content": content}], add_generation_prompt=False)
    assert out == "<|im_start|>user\nSee <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"


def test_scalar_arguments_follow_jinja_string_filter():
    call = {"function": {"name": "f", "arguments": {"flag": True, "none": None}}}
    out = render_chat([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}],
                      add_generation_prompt=False)
    assert "<parameter=flag>\nTrue\n</parameter>\n<parameter=none>\nNone\n</parameter>\n" in out


def test_continue_final_message_cuts_after_partial_answer():
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Partial"}]
    out = render_chat(messages, add_generation_prompt=False, continue_final_message=True)
    assert out == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nPartial"
    with pytest.raises(TemplateError):
        render_chat(messages, add_generation_prompt=True, continue_final_message=True)


def test_invalid_json_arguments_raise():
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{nope"}}]}]
    with pytest.raises(TemplateError):
        render_chat(messages)


def test_large_prompt_renders_and_encodes_fast():
    import time

    import polar_jobs.sim as sim
    from polar_jobs.sim.tokenizer import encode

    assert sorted(sim.__all__) == ["create_sim_app", "render_chat", "run_sim"]
    encode("warm up")
    messages = [{"role": "system", "content": "You are helpful. " * 200}]
    for i in range(180):
        messages.append({"role": "user", "content": f"Question {i}: " + "lorem ipsum dolor sit amet, " * 20})
        messages.append({"role": "assistant", "content": "answer " * 50, "reasoning": "hmm " * 20})
    messages.append({"role": "user", "content": "final"})
    start = time.perf_counter()
    ids = encode(render_chat(messages))
    elapsed = time.perf_counter() - start
    assert len(ids) > 32_000
    assert elapsed < 0.1
