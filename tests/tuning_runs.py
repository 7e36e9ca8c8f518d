"""An EAGLE-3 tuning sweep as the rehearsal host records it (steps x topk, 2 repeats), written through
the real Store into a real SQLite file. Its measures follow a draft's cost: accept length grows with
steps and topk (saturating), but each decode round costs more with every drafted token, so the
fastest configuration is a short chain, not the one with the highest accept length.

The rehearsal's own throughput is the wall time of a CPU stand-in on a shared machine: too noisy to
rank on in a test, so the measures here come from the cost model below.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from orchestrator.store.database import MetricRow, Run, SeriesRow, Store

STEPS, TOPK, REPEATS = (1, 3, 5), (1, 2, 4), 2
CONCURRENCY = 4
_uids = itertools.count(1)


def accept_len(steps: int, topk: int) -> float:
    """Tokens per decode round: more draft steps and a wider tree accept more, each step less."""
    return 1 + (1 - 0.55 ** steps) * (1.1 + 0.45 * math.log2(topk))


def round_ms(steps: int, topk: int) -> float:
    """One decode round: the target's verify pass plus a draft pass per step, wider with topk."""
    return 9 + 1.5 * steps * (1 + 0.6 * (topk - 1))


def measures(steps: int, topk: int, repeat: int) -> dict[str, float]:
    """A repeat's metrics; repeats differ by a fraction of a percent, as a quiet GPU's do."""
    jitter = 1 + (0.004 if repeat % 2 else -0.004)
    accept = accept_len(steps, topk) * (1 + (repeat - 0.5) * 0.002)
    itl = round_ms(steps, topk) / accept * jitter
    tail = 1.3 + 0.08 * steps * topk  # a wider tree's verify passes: a longer tail of inter-token latency
    return {"accept_len": accept, "output_tok_s": CONCURRENCY * 1000 / itl, "itl_ms_p50": itl,
            "itl_ms_p99": itl * tail, "ttft_ms_p50": 40 + 2 * steps * topk, "startup_s": 30 + steps, "requests": 16}


def fastest() -> tuple[int, int]:
    """(steps, topk) of the highest median throughput, from the cost model itself."""
    return max(itertools.product(STEPS, TOPK), key=lambda p: accept_len(*p) / round_ms(*p))


def highest_accept() -> tuple[int, int]:
    return max(itertools.product(STEPS, TOPK), key=lambda p: accept_len(*p))


def fastest_meeting(least_accept: float) -> tuple[int, int]:
    meeting = [p for p in itertools.product(STEPS, TOPK) if accept_len(*p) >= least_accept]
    return max(meeting, key=lambda p: accept_len(*p) / round_ms(*p))


def fill(path: Path, objective: dict[str, Any] | None = None, experiment: str = "tuning") -> Store:
    """The sweep's 18 runs; `objective`: the experiment file's `objective:`, stored in each run's spec."""
    store = Store(f"sqlite:///{path}")
    spec = {"name": experiment, "params": {"model_path": "{{ host.rehearsal }}/checkpoints/kimi-k25-target"},
            **({"objective": objective} if objective else {})}
    for steps, topk, repeat in itertools.product(STEPS, TOPK, range(REPEATS)):
        params = {"model_path": "/home/u/.orch/rehearsal/checkpoints/kimi-k25-target", "tp_size": 8,
                  "speculative_algorithm": "EAGLE3", "speculative_num_steps": steps, "speculative_eagle_topk": topk,
                  "port": 30000 + repeat}
        run = Run(uid=f"2026-tuning-{next(_uids)}", experiment=experiment, variant="sweep", host="local",
                  status="succeeded", repeat=repeat, spec=spec, params=params,
                  flags=["--speculative-algorithm", "EAGLE3"], command="python -m sglang.launch_server\n")
        store.add(run)
        values = measures(steps, topk, repeat)
        rows: list[Any] = [MetricRow(run_id=run.id, name=k, value=v, source="rehearsal") for k, v in values.items()]
        rows += [SeriesRow(run_id=run.id, kind="decode", seq=i, time=f"2026-01-01 00:00:{i:02d}",
                           values={"accept_len": values["accept_len"] + 0.05 * (i % 3)}) for i in range(6)]
        store.add(*rows)
    return store
