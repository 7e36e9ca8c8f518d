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
