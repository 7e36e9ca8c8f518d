"""A sweep of three plans (speculative_num_steps x 3) on one rehearsal host of one GPU, so its runs
follow each other: what the tests of `orch stop RUN` and `orch run --wait` run."""

from __future__ import annotations

from pathlib import Path

from conftest import free_port

SPEC = """\
name: {name}
hosts: [solo]
template: ../templates/sglang_launch.sh.j2
params:
  model_path: "{{{{ host.rehearsal }}}}/checkpoints/llama-target"
  draft_model_path: "{{{{ host.rehearsal }}}}/checkpoints/eagle3-draft"
  tp_size: 1
  mem_fraction_static: 0.85
  num_continuous_decode_steps: 1
  disable_cuda_graph: false
  speculative_algorithm: EAGLE3
  speculative_eagle_topk: 1
  speculative_num_draft_tokens: 4
  port: {port}
env:
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"
matrix:
  speculative_num_steps: [2, 3, 4]
workload: {{requests: {requests}, max_new_tokens: 32}}
ready_timeout: 60
"""


def three_plans(project: Path, requests: int = 8, name: str = "steps") -> Path:
    """The inventory's one host `solo` (one GPU: one run at a time) and the experiment `name`."""
    (project / "inventory.yaml").write_text(
        f"hosts:\n  solo:\n    transport: local\n    workdir: {project / 'solo'}\n    gpus: 1\n    rehearsal: true\n")
    path = project / "experiments" / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, port=free_port(), requests=requests))
    return path
