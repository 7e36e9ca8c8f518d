"""Planning `orch run --resume` against a big database: today's way next to the way before it.

    python bench/resume.py [--runs 100000] [--plans 10000]

Fabricates `--runs` runs of the demo experiment (experiments/eagle_debug.yaml with a matrix over
speculative_num_steps, `--plans` plans) in a temporary SQLite file (deleted afterwards), inserted
with one executemany: each plan has runs/plans runs, 7 in 10 succeeded, the rest failed or
interrupted; 1 plan in 10 has only runs of an older fingerprint. Each row carries what a real run
does (the experiment as JSON, rendered params and env, a launch script).

Each way runs in a child process of its own, so that one's memory does not count for the other:
- key: Store.succeeded_keys (key, fingerprint, id of the succeeded runs, through the resume index)
  and plankey.decide;
- whole runs: the way before keys, every succeeded run loaded (Store.runs) and its params compared.
Printed: wall seconds of the planning step, the child's peak RSS (imports, plans and planning
together) and the most memory planning itself allocates (tracemalloc, in a second, untimed pass).
The plans' fingerprints are made before the clock starts (every `orch run` makes them); their time
is printed too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.core import spec as specs  # noqa: E402
from orchestrator.run import plankey  # noqa: E402
from orchestrator.store.database import FAILED, INTERRUPTED, SUCCEEDED, Store  # noqa: E402

DEMO = ROOT / "experiments" / "eagle_debug.yaml"
COLUMNS = ("uid", "experiment", "variant", "host", "status", "repeat", "spec_path", "spec", "params", "env",
           "command", "flags", "controller", "started_at", "plan_key", "fingerprint")


def demo_plans(plans: int) -> tuple[list[specs.RunPlan], float]:
    """The plans, fingerprinted, and the seconds fingerprinting took."""
    spec = specs.load(DEMO)
    spec = dataclasses.replace(spec, matrix={"speculative_num_steps": tuple(range(plans // len(spec.variants)))})
    expanded = specs.expand(spec)
    started = time.perf_counter()
    return plankey.fingerprinted(spec, expanded), time.perf_counter() - started


def fabricate(path: Path, runs: int, plans: list[specs.RunPlan]) -> None:
    store = Store(f"sqlite:///{path}")  # the real schema, indexes included
    spec = specs.load(DEMO)
    raw, command = json.dumps(spec.raw, default=str), spec.template.read_text()
    rows = []
    for i in range(runs):
        plan = plans[i % len(plans)]
        status = (SUCCEEDED,) * 7 + (FAILED, FAILED, INTERRUPTED)
        params = {k: str(v).replace("{{ host.rehearsal }}", "/home/orch/.orch/rehearsal")  # rendered, as stored
                  for k, v in plan.params.items()}
        fingerprint = plan.fingerprint if i % 10 else "0" * 64  # an older fingerprint now and then
        rows.append((f"run{i:08d}", plan.experiment, plan.variant, "gpu-host-1", status[(i // len(plans)) % 10],
                     plan.repeat, str(DEMO), raw, json.dumps(params), json.dumps(plan.env), command, "[]",
                     "controller:1", "2026-01-01T00:00:00", plan.key, fingerprint))
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"INSERT INTO run ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", rows)
    store.engine.dispose()


def by_key(store: Store, plans: list[specs.RunPlan]) -> int:
    return sum(d.runs for d in plankey.decide(plans, store.succeeded_keys(plans[0].experiment)))


def by_whole_runs(store: Store, plans: list[specs.RunPlan]) -> int:
    """The way before keys (orchestrator/cli/runs.py before this benchmark): every succeeded run loaded."""
    done: dict[tuple[str, str], int] = {}
    for r in store.runs(status=SUCCEEDED):
        key = (r.variant, json.dumps(r.params, sort_keys=True, default=str))
        done[key] = done.get(key, 0) + 1
    left = 0
    for plan in plans:
        key = (plan.variant, json.dumps(plan.params, sort_keys=True, default=str))
        if done.get(key, 0) > 0:
            done[key] -= 1
        else:
            left += 1
    return left


def peak_mb() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not carried over from the parent across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB, without /proc


def measure(way: str, path: Path, plans: int) -> None:
    """One way, in this (child) process: prints a JSON line."""
    plan_list, fingerprinting = demo_plans(plans)
    store = Store(f"sqlite:///{path}")
    plan_resume = by_key if way == "key" else by_whole_runs
    before = peak_mb()
    started = time.perf_counter()
    to_run = plan_resume(store, plan_list)
    seconds = time.perf_counter() - started
    peak = peak_mb()
    tracemalloc.start()  # a second pass, traced: what planning itself allocates at most
    plan_resume(store, plan_list)
    allocated = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    print(json.dumps({"way": way, "seconds": seconds, "peak_mb": peak, "before_mb": before, "allocated_mb": allocated,
                      "to_run": to_run, "plans": len(plan_list), "fingerprinting": fingerprinting}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--measure", choices=("key", "whole"), help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.db, args.plans)
        return
    with tempfile.TemporaryDirectory(prefix="orch-bench-resume-") as tmp:
        path = Path(tmp) / "orch.db"
        started = time.perf_counter()
        fabricate(path, args.runs, demo_plans(args.plans)[0])
        print(f"{args.runs} runs of {args.plans} plans fabricated in {time.perf_counter() - started:.1f} s "
              f"({path.stat().st_size / 2**20:.0f} MiB)")
        for way, name in (("key", "by key (succeeded_keys)"), ("whole", "whole runs (before keys)")):
            done = subprocess.run([sys.executable, __file__, "--measure", way, "--db", str(path),
                                   "--plans", str(args.plans)], capture_output=True, text=True, check=True)
            r = json.loads(done.stdout)
            print(f"{name:26} {r['seconds']:7.3f} s  peak RSS {r['peak_mb']:6.0f} MB ({r['before_mb']:.0f} before planning), planning allocates "
                  f"{r['allocated_mb']:6.1f} MB;  {r['to_run']} of {r['plans']} plans to run  "
                  f"(fingerprinting the plans: {r['fingerprinting']:.2f} s)")


if __name__ == "__main__":
    main()
