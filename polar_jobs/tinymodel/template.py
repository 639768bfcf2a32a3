"""A Qwen3.5-style Jinja chat template (Qwen3-Coder XML tool calls), as served by the tiny model.

It mirrors ``polar_jobs.sim.template.render_chat`` so the sim and the real engine render alike; the
tool-call form is what vLLM's ``--tool-call-parser qwen3_coder`` parses. Pure: no imports.
"""

from __future__ import annotations

# The same text as ``polar_jobs.sim.template`` (a unit test keeps them equal); copied so that the vLLM
# venv, which lacks the project's dependencies, can import this module.
TOOLS_HEADER = '# Tools\n\nYou have access to the following functions:\n\n<tools>'
TOOLS_FOOTER = (
    '\n'
    '</tools>\n'
    '\n'
    'If you choose to call a function ONLY reply in the following format with NO suffix:\n'
    '\n'
    '<tool_call>\n'
    '<function=example_function_name>\n'
    '<parameter=example_parameter_1>\n'
    'value_1\n'
    '</parameter>\n'
    '<parameter=example_parameter_2>\n'
    'This is the value for the second parameter\n'
    'that can span\n'
    'multiple lines\n'
    '</parameter>\n'
    '</function>\n'
    '</tool_call>\n'
    '\n'
    '<IMPORTANT>\n'
    'Reminder:\n'
    '- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n'
    '- Required parameters MUST be specified\n'
    '- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n'
    '- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n'
    '</IMPORTANT>'
)


def _lit(text: str) -> str:
    """A Jinja string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


CHAT_TEMPLATE = (
    "{%- macro render_content(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- elif content is none -%}"
    "{%- else -%}{%- for item in content -%}"
    "{%- if item.text is defined -%}{{- item.text -}}"
    "{%- elif item.type in ['image', 'image_url'] or item.image is defined or item.image_url is defined -%}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif item.type == 'video' or item.video is defined -%}{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    # system block (with the tool list)
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' + " + _lit(TOOLS_HEADER) + " -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- " + _lit(TOOLS_FOOTER) + " -}}"
    "{%- if messages[0].role == 'system' -%}{%- set sys = render_content(messages[0].content) | trim -%}"
    "{%- if sys -%}{{- '\\n\\n' + sys -}}{%- endif -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + (render_content(messages[0].content) | trim) + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    # last real user query
    "{%- set ns = namespace(last_query=-1) -%}"
    "{%- for message in messages -%}{%- if message.role == 'user' -%}"
    "{%- set t = render_content(message.content) | trim -%}"
    "{%- if not (t.startswith('<tool_response>') and t.endswith('</tool_response>')) -%}"
    "{%- set ns.last_query = loop.index0 -%}{%- endif -%}{%- endif -%}{%- endfor -%}"
    "{%- if ns.last_query < 0 -%}{{- raise_exception('No user query found in messages.') -}}{%- endif -%}"
    # turns
    "{%- for message in messages -%}"
    "{%- set content = render_content(message.content) | trim -%}"
    "{%- if message.role == 'system' -%}"
    "{%- if not loop.first -%}{{- raise_exception('System message must be at the beginning.') -}}{%- endif -%}"
    "{%- elif message.role == 'user' -%}{{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{%- set reasoning = '' -%}"
    "{%- if message.reasoning_content is string -%}{%- set reasoning = message.reasoning_content | trim -%}"
    "{%- elif message.reasoning is string -%}{%- set reasoning = message.reasoning | trim -%}"
    "{%- elif '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') | trim -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_query -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content -}}"
    "{%- else -%}{{- '<|im_start|>assistant\\n' + content -}}{%- endif -%}"
    "{%- if message.tool_calls -%}{%- for call in message.tool_calls -%}"
    "{%- set fn = call.function if call.function is defined else call -%}"
    "{%- if loop.first -%}{%- if content | trim -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n<function=' + fn.name + '>\\n' -}}"
    "{%- else -%}{{- '\\n<tool_call>\\n<function=' + fn.name + '>\\n' -}}{%- endif -%}"
    "{%- if fn.arguments is mapping -%}{%- for key, value in fn.arguments.items() -%}"
    "{{- '<parameter=' + key + '>\\n' -}}"
    "{%- if value is mapping or (value is sequence and value is not string) -%}{{- value | tojson -}}"
    "{%- else -%}{{- value | string -}}{%- endif -%}"
    "{{- '\\n</parameter>\\n' -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '</function>\\n</tool_call>' -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.index0 > 0 and loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}{{- raise_exception('Unexpected message role.') -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)
