"""vLLM's engine-config line, `Initializing a V1 LLM engine (v0.32.0) with config: model='...',
speculative_config=SpeculativeConfig(method='eagle3', model='...', num_spec_tokens=3), ...,
max_seq_len=256, ..., enforce_eager=False, ...` (VllmConfig.__str__: 0.10.1.1
`vllm/config/__init__.py:3825`, 0.32.0 `vllm/config/vllm.py:2703`; logged by 0.32.0
`vllm/v1/engine/core.py:134`): the values the engine built after its own adjustments, where
`non-default args:` is only what its parser read. Read into the argument names `non-default args`
uses, so the two compare key by key."""

from __future__ import annotations

import ast
import re

HEADER = " with config: "
# the line's name -> the argument's (VllmConfig.__str__ prints max_model_len as max_seq_len)
NAMES = {"model": "model", "max_seq_len": "max_model_len", "tensor_parallel_size": "tensor_parallel_size",
         "pipeline_parallel_size": "pipeline_parallel_size", "data_parallel_size": "data_parallel_size",
         "dtype": "dtype", "enforce_eager": "enforce_eager", "enable_prefix_caching": "enable_prefix_caching",
         "enable_chunked_prefill": "enable_chunked_prefill", "kv_cache_dtype": "kv_cache_dtype",
         "chunked_prefill_enabled": "enable_chunked_prefill",  # 0.10.1.1's name (config/__init__.py:3851)
         "trust_remote_code": "trust_remote_code", "quantization": "quantization", "seed": "seed"}
# SpeculativeConfig.__repr__ (0.32.0 config/speculative.py:1990) -> the --speculative-config keys
SPEC_NAMES = {"method": "method", "model": "model", "num_spec_tokens": "num_speculative_tokens"}
_OPEN, _CLOSE = "([{", ")]}"


def fields(text: str) -> dict[str, str]:
    """The line's top-level `name=value` pairs, values as printed (commas inside brackets or
    quotes belong to the value)."""
    found: dict[str, str] = {}
    depth, quote, start = 0, "", 0
    for at, char in enumerate(text + ","):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif char == "," and depth == 0:
            name, sep, value = text[start:at].strip().partition("=")
            if sep:
                found[name.strip()] = value.strip()
            start = at + 1
    return found


def value(text: str) -> object:
    """A printed value as Python reads it (`256`, `True`, `'/m'`, `None`); else the text (`torch.bfloat16`)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text.removeprefix("torch.")


def parsed(engine_config: str | None) -> dict[str, object]:
    """The config line's values under the argument names; {} when there is none."""
    if not engine_config:
        return {}
    printed = fields(engine_config)
    found: dict[str, object] = {NAMES[k]: value(v) for k, v in printed.items() if k in NAMES}
    spec = re.fullmatch(r"SpeculativeConfig\((.*)\)", printed.get("speculative_config", ""))
    if spec:
        inner = fields(spec.group(1))
        found["speculative_config"] = {SPEC_NAMES[k]: value(v) for k, v in inner.items() if k in SPEC_NAMES}
    return found
