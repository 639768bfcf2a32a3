"""A vLLM v1 logits processor that makes the real engine emit an exact token script.

Load it with ``--logits-processors polar_jobs.tinymodel.scripted:ScriptedLogitsProcessor`` (the repository
on ``PYTHONPATH``). A request is scripted when either

* its ``vllm_xargs`` carry ``polar_script`` (the text to emit, special tokens allowed) or
  ``polar_script_ids`` (a list of token ids), or
* its prompt contains ``polar-script:KEY`` and ``$POLAR_SCRIPT_DIR/KEY.json`` exists, holding
  ``{"text": ...}`` or ``{"ids": [...]}`` (the last marker with a file wins). This is how a test scripts
  calls that reach the engine through the proxy and a harness, which never pass ``vllm_xargs``.

At step i every logit but the script's i-th token is set to -inf, so the sampled ids are the script;
vLLM computes logprobs from the raw distribution, so they stay the model's own. After the script the
processor forces ``<|im_end|>``. Requests without a script are untouched; each request keeps its own.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

IM_END_ID = 248046
MARKER = re.compile(r"polar-script:([A-Za-z0-9_.-]+)")


def script_dir() -> Path:
    return Path(os.environ.get("POLAR_SCRIPT_DIR") or "/tmp/polar-scripts")


class ScriptedLogitsProcessor(AdapterLogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        from tokenizers import Tokenizer

        path = Path(vllm_config.model_config.tokenizer) / "tokenizer.json"
        self._tokenizer = Tokenizer.from_file(str(path))

    def is_argmax_invariant(self) -> bool:
        return False

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def _from_prompt(self, prompt_ids: list[int]) -> list[int] | None:
        text = self._tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        for key in reversed(MARKER.findall(text)):
            file = script_dir() / f"{key.rstrip('.')}.json"
            if file.is_file():
                return self._script(json.loads(file.read_text()))
        return None

    def _script(self, spec: Any) -> list[int]:
        if isinstance(spec, dict):
            ids = spec.get("ids")
            ids = [int(i) for i in ids] if ids is not None else self._encode(str(spec.get("text", "")))
        elif isinstance(spec, list):
            ids = [int(i) for i in spec]
        else:
            ids = self._encode(str(spec))
        return ids if ids and ids[-1] == IM_END_ID else ids + [IM_END_ID]

    def new_req_logits_processor(self, params):
        extra = getattr(params, "extra_args", None) or {}
        script: list[int] | None = None
        if extra.get("polar_script_ids") is not None:
            script = self._script(list(extra["polar_script_ids"]))
        elif extra.get("polar_script") is not None:
            script = self._script({"text": extra["polar_script"]})
        state: dict[str, Any] = {"script": script, "resolved": script is not None}

        def force(prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            if not state["resolved"]:
                state["script"] = self._from_prompt(prompt_ids)
                state["resolved"] = True
            ids = state["script"]
            if ids is None:
                return logits
            step = len(output_ids)
            target = ids[step] if step < len(ids) else IM_END_ID
            keep = logits[target].clone()
            logits.fill_(float("-inf"))
            logits[target] = keep
            return logits

        return force
