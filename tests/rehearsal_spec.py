"""The small SGLang experiment the rehearsal-host tests run: the stand-in's demo checkpoints, EAGLE3,
a two-request workload. Tests that need a patch or a longer load pass them in."""

from __future__ import annotations

TEMPLATE = """\
name: {name}
hosts: [local]
template: ../templates/sglang_launch.sh.j2
params:
  model_path: "{{{{ host.rehearsal }}}}/checkpoints/llama-target"
  draft_model_path: "{{{{ host.rehearsal }}}}/checkpoints/eagle3-draft"
  tp_size: 2
  mem_fraction_static: 0.85
  num_continuous_decode_steps: 1
  disable_cuda_graph: true
  speculative_algorithm: EAGLE3
  speculative_num_steps: 3
  speculative_eagle_topk: 1
  speculative_num_draft_tokens: 4
  port: {port}
env:
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"
  ORCH_REHEARSAL_LOAD_SECONDS: "{load}"
{patches}workload: {{requests: 2, max_new_tokens: 8, concurrency: 2}}
ready_timeout: 60
"""


def sglang(name: str, port: int, load: float = 1, patches: str = "") -> str:
    """The experiment's text; `patches` is a whole `patches:` block (ending in a newline) or ""."""
    return TEMPLATE.format(name=name, port=port, load=load, patches=patches)
