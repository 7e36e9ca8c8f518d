"""Experiments and stores built for a test: the demo experiment changed, the rehearsal experiment
built (rehearsal_experiment), runs written through the Store."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conftest import ROOT, free_port
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

# The rehearsal stand-in's one-GPU EAGLE3 experiment, the params of each engine's shipped template
# (vLLM's: the few the stand-in reads); the builder below changes what a test needs.
REHEARSAL_PARAMS: dict[str, dict[str, Any]] = {
    "sglang": {
        "model_path": "{{ host.rehearsal }}/checkpoints/llama-target",
        "draft_model_path": "{{ host.rehearsal }}/checkpoints/eagle3-draft",
        "tp_size": 1,
        "mem_fraction_static": 0.85,
        "num_continuous_decode_steps": 1,
        "disable_cuda_graph": False,
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "port": 30000,
    },
    "vllm": {
        "model_path": "{{ host.rehearsal }}/checkpoints/llama-target",
        "draft_model_path": "{{ host.rehearsal }}/checkpoints/eagle3-draft",
        "tp_size": 1,
        "speculative_method": "eagle3",
        "num_speculative_tokens": 3,
        "port": 30000,
    },
}
REHEARSAL_ENV = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
HIDDEN_STATES = "hidden_states = forward_batch.spec_info.hidden_states"  # the EAGLE3 loader's anchor line


def rehearsal_experiment(name: str, *, engine: str | None = None, hosts: Sequence[str] | None = ("local",),
                         params: Mapping[str, Any] | None = None, env: Mapping[str, Any] | None = None,
                         workload: Mapping[str, Any] | None = None, extra: str = "") -> str:
    """The text of the rehearsal EAGLE3 experiment `name` on one GPU of `hosts` (None: no `hosts:`)
    by `engine` (None: no `engine:`, so SGLang). `params` and `env` change the shipped ones (a None
    param is left out, for a matrix to set), `workload` is the workload's mapping (None: none),
    `extra` more top-level YAML as written (patches, variants, matrix, ready_timeout). Values are
    written as JSON, which YAML reads alike."""
    merged = {**REHEARSAL_PARAMS[engine or "sglang"], **(params or {})}
    lines = [f"name: {name}", *([f"engine: {engine}"] if engine else [])]
    if hosts is not None:
        lines.append(f"hosts: [{', '.join(hosts)}]")
    lines += [f"template: ../templates/{engine or 'sglang'}_launch.sh.j2", "params:"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in merged.items() if value is not None]
    lines += ["env:", *(f"  {key}: {json.dumps(value)}" for key, value in {**REHEARSAL_ENV, **(env or {})}.items())]
    if workload is not None:
        lines.append(f"workload: {json.dumps(workload)}")
    return "\n".join(lines) + "\n" + extra


def debug_patch(name: str, line: str, *, file: str = "sglang:srt/models/llama_eagle3.py",
                find: str = HIDDEN_STATES) -> str:
    """A `patches:` block of the one patch `name`: `line` inserted after `find` in `file`."""
    return f"patches:\n  {name}:\n    file: {file}\n    find: {json.dumps(find)}\n    insert_after: |\n      {line}\n"


def small_experiment(name: str, port: int, load: float = 1, patches: str = "", *,
                     hosts: Sequence[str] = ("local",), params: Mapping[str, Any] | None = None) -> str:
    """The rehearsal experiment the host tests run: on two GPUs, the stand-in loading for `load`
    seconds, two requests; `patches` a whole `patches:` block (debug_patch) or ""."""
    return rehearsal_experiment(name, hosts=hosts, params={"tp_size": 2, "disable_cuda_graph": True, "port": port,
                                                           **(params or {})},
                                env={"ORCH_REHEARSAL_LOAD_SECONDS": str(load)},
                                workload={"requests": 2, "max_new_tokens": 8, "concurrency": 2},
                                extra=patches + "ready_timeout: 60\n")


def three_plans(project: Path, requests: int = 8, name: str = "steps") -> Path:
    """A sweep of three plans (speculative_num_steps x 3) on the inventory's one host `solo` (one GPU:
    its runs follow each other), what the tests of `orch stop RUN` and `orch run --wait` run."""
    (project / "inventory.yaml").write_text(
        f"hosts:\n  solo:\n    transport: local\n    workdir: {project / 'solo'}\n    gpus: 1\n    rehearsal: true\n")
    path = project / "experiments" / f"{name}.yaml"
    path.write_text(rehearsal_experiment(
        name, hosts=["solo"], params={"speculative_num_steps": None, "port": free_port()},
        workload={"requests": requests, "max_new_tokens": 32},
        extra="matrix:\n  speculative_num_steps: [2, 3, 4]\nready_timeout: 60\n"))
    return path


# the engine's own benchmark tool as the workload, one argument misspelt
TOOL_ARGS = {"dataset-name": "random-ids", "num_promts": 8}


def tool_experiment(args: Mapping[str, Any] = TOOL_ARGS) -> str:
    """The rehearsal experiment `tool` whose workload is sglang.bench_serving with `args`."""
    return rehearsal_experiment("tool", workload={"tool": "sglang.bench_serving", "args": dict(args)})


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
