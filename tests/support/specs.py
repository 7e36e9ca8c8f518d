"""Experiments and stores built for a test: the demo experiment changed, runs written through the Store."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT
from orchestrator.store.database import SUCCEEDED, MetricRow, PatchRow, Run

from support.cli import orch

FIXTURES = ROOT / "tests" / "fixtures" / "logs"  # real engines' logs, for `orch import`
DEMO_WORKLOAD = "workload:\n  requests: 16\n  max_new_tokens: 96\n  concurrency: 4\n"


def demo_spec(project: Path, requests: int = 16) -> Path:
    """The demo experiment in the project, with `requests` requests."""
    spec = project / "experiments" / "eagle_debug.yaml"
    spec.write_text((ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("requests: 16", f"requests: {requests}"))
    return spec


def experiment(project: Path, extra: str, workload: str = "") -> Path:
    """The demo plus `extra`; `workload` (a `requests, max_new_tokens, concurrency` flow mapping) replaces its own."""
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text()
    assert DEMO_WORKLOAD in text
    if workload:
        text = text.replace(DEMO_WORKLOAD, f"workload: {{{workload}}}\n")
    path = project / "experiments" / "reuse.yaml"
    path.write_text(text + "\n" + extra)
    return path


# The run table as orch wrote it before the schema carried a version: no `diagnosis` column, no
# version table. (A trimmed copy of the old DDL; the other tables were created by then too.)
OLD_RUN = """CREATE TABLE run (id INTEGER NOT NULL PRIMARY KEY, uid VARCHAR NOT NULL, experiment VARCHAR NOT NULL,
variant VARCHAR NOT NULL, host VARCHAR NOT NULL, status VARCHAR NOT NULL, repeat INTEGER NOT NULL,
spec_path VARCHAR NOT NULL, spec JSON, params JSON, env JSON, command VARCHAR NOT NULL, flags JSON,
error VARCHAR, controller VARCHAR NOT NULL, started_at VARCHAR NOT NULL, ended_at VARCHAR)"""

# the rehearsal demo on one GPU, its workload the engine's own benchmark tool with a misspelt argument
TOOL_EXPERIMENT = """\
name: tool
hosts: [local]
template: ../templates/sglang_launch.sh.j2
params:
  model_path: "{{ host.rehearsal }}/checkpoints/llama-target"
  draft_model_path: "{{ host.rehearsal }}/checkpoints/eagle3-draft"
  tp_size: 1
  mem_fraction_static: 0.85
  num_continuous_decode_steps: 1
  disable_cuda_graph: false
  speculative_algorithm: EAGLE3
  speculative_num_steps: 3
  speculative_eagle_topk: 1
  speculative_num_draft_tokens: 4
  port: 30000
env:
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN: "1"
workload:
  tool: sglang.bench_serving
  args:
    dataset-name: random-ids
    num_promts: 8
"""


SPEC = {"params": {"model_path": "{{ host.rehearsal }}/target", "steps": 3}, "variants": {"fixed": {}, "other": {}}}


def make_run(store, n, *, steps, tok_s, accept, host="a", port=30000, status=SUCCEEDED, variant="fixed",
             patch_sha="b" * 64, experiment="sweep"):
    run = Run(uid=f"2026-{experiment}-{n}", experiment=experiment, variant=variant, host=host, status=status,
              spec=SPEC, params={"model_path": f"/{host}/target", "steps": steps, "topk": 1, "port": port,
                                 "gpus": f"{n % 2}"})
    store.add(run)
    store.add(MetricRow(run_id=run.id, name="accept_len", value=accept, source="meta_info"),
              MetricRow(run_id=run.id, name="accept_len", value=None, source="decode_log"),
              MetricRow(run_id=run.id, name="output_tok_s", value=tok_s, source="orch"),
              MetricRow(run_id=run.id, name="startup_s", value=10.0 + n, source="orch"),
              MetricRow(run_id=run.id, name="requests", value=16, source="orch"),
              PatchRow(run_id=run.id, seq=1, name="fix", target="engine:x.py", file="/x.py", sha256_before="a" * 64,
                       sha256_after=patch_sha, state="reverted"))
    return run


def runs(project: Path) -> list[dict]:
    listing = json.loads(orch(project, "ls", "--json").stdout)
    return [json.loads(orch(project, "show", str(r["id"]), "--json").stdout) for r in listing]


def window(run: dict) -> tuple[str, str]:
    """When the run's server was up: its launch and stop events."""
    at = {e["kind"]: e["at"] for e in run["events"]}
    return at["launched"], at["stopped"]
