"""Runs for the report tests, written through the real Store into a real SQLite file: a 2x2 sweep
(steps x topk) with 2 repeats, one patch set, and one run whose every text is hostile markup."""

from __future__ import annotations

import itertools
from pathlib import Path

from orchestrator.store.database import DebugRow, MetricRow, PatchRow, Run, SeriesRow, Store

_uids = itertools.count(1)
HOSTILE = '<script>window.__injected = 1</script><img src="http://example.invalid/x.png">'


def add_run(store: Store, *, variant: str, params: dict, accept: float, tok_s: float, repeat: int,
            patch: str | None = None, debug: str = "[EAGLE3-DEBUG] shape=torch.Size([1, 64])") -> Run:
    run = Run(uid=f"2026-run-{next(_uids)}", experiment="sweep", variant=variant, host="local",
              status="succeeded", repeat=repeat, params=params, flags=["--speculative-algorithm", "EAGLE3"],
              command="run --x\n")
    store.add(run)
    rows = [MetricRow(run_id=run.id, name="accept_len", value=accept, source="log"),
            MetricRow(run_id=run.id, name="output_tok_s", value=tok_s, source="workload"),
            MetricRow(run_id=run.id, name="startup_s", value=12.5, source="orch"),
            MetricRow(run_id=run.id, name="accept_rate", value=None, source="log", note="absent"),
            DebugRow(run_id=run.id, seq=0, text=debug, fields={})]
    rows += [SeriesRow(run_id=run.id, kind="decode", seq=i, time=f"2026-01-01 00:00:{i:02d}",
                       values={"accept_len": accept + 0.1 * (i % 3), "gen_throughput": tok_s})
             for i in range(8)]
    if patch:
        rows.append(PatchRow(run_id=run.id, seq=1, name=patch, target="engine:x.py", file="/x.py",
                             sha256_before="a" * 64, sha256_after="b" * 64, state="reverted"))
    store.add(*rows)
    return run


def fill(path: Path, hostile: bool = True) -> Store:
    store = Store(f"sqlite:///{path}")
    for steps in (1, 3):
        for topk in (1, 4):
            for repeat in range(2):
                add_run(store, variant="sweep", repeat=repeat, accept=1.0 + steps * 0.5 + topk * 0.1 + repeat * 0.05,
                        tok_s=300.0 - steps * 20 + topk * 5 + repeat * 7,
                        params={"steps": steps, "topk": topk, "model": "/m/llama", "port": 30000 + repeat})
    add_run(store, variant="patched", repeat=0, accept=3.1, tok_s=250.0, patch="aux-fix",
            params={"steps": 3, "topk": 4, "model": "/m/llama", "port": 30001})
    if hostile:
        add_run(store, variant=HOSTILE, repeat=0, accept=1.2, tok_s=100.0, patch=HOSTILE, debug=HOSTILE,
                params={"steps": 1, "topk": 1, "model": HOSTILE, "port": 30002})
    return store
