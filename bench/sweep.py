"""Sweep benchmark: 16 rehearsal runs (tp_size 1, 2, 4, 8, four of each) on 2 hosts of 8 GPUs.

As root: the two hosts are network namespaces with their own sshd (tests/sshd.py), so their
servers' ports never meet (two local-transport hosts on one machine would both start slot 0 on
the plan's port). The same sweep runs twice through the real `orch run`:

  slots        several runs at once per host, as their tp_size fits its GPUs (the queue and slots)
  one-per-host each run pins itself (env CUDA_VISIBLE_DEVICES), so runs alone on its host, as
               every run did before the slots

and prints, for each: wall time; the ideal (GPU-seconds of the runs / the GPUs of the hosts: each
run's time x its tp_size, from the one-per-host runs: runs at once on a rehearsal host share its
CPU and take longer); efficiency = ideal / wall; the orchestration overhead per run (its
time minus server start and workload); then slots against one-per-host.

    sudo .venv/bin/python bench/sweep.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import sshd  # noqa: E402
from orchestrator.store.database import Store  # noqa: E402

HOSTS, GPUS = 2, 8
TP_SIZES = (1, 2, 4, 8)


def project(work: Path, fleet: sshd.Fleet) -> Path:
    """Inventory (the fleet's hosts, rehearsal, 8 GPUs) and the demo's `fixed` variant over tp_size."""
    known = fleet.known_hosts()
    (work / "inventory.yaml").write_text("hosts:\n" + "".join(s.rehearsal_entry(known, work / "w" / s.name)
                                                             for s in fleet.servers))
    (work / "templates").mkdir(exist_ok=True)
    (work / "templates" / "sglang_launch.sh.j2").write_text((ROOT / "templates" / "sglang_launch.sh.j2").read_text())
    (work / "experiments").mkdir(exist_ok=True)
    spec = work / "experiments" / "sweep.yaml"
    text = (ROOT / "experiments" / "eagle_debug.yaml").read_text().replace("hosts: [local]", "hosts: []")
    spec.write_text(text + f"\nmatrix:\n  tp_size: {list(TP_SIZES)}\nrepeats: {16 // len(TP_SIZES)}\n")
    return spec


def orch(work: Path, db: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(work), "ORCH_DB": f"sqlite:///{work / db}", "PYTHONPATH": str(ROOT),
           "ORCH_INVENTORY": str(work / "inventory.yaml"), "COLUMNS": "200"}
    env.pop("SSH_AUTH_SOCK", None)
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=1200)


def sweep(work: Path, fleet: sshd.Fleet, spec: Path, mode: str, port: int, ideal: float | None = None) -> dict[str, float]:
    """One sweep: its wall time against `ideal` (default: from its own runs' times)."""
    db = f"{mode}.db"
    hosts = ",".join(s.name for s in fleet.servers)
    pin = ["--set", f"env.CUDA_VISIBLE_DEVICES={','.join(map(str, range(GPUS)))}"] if mode == "one-per-host" else []
    started = time.perf_counter()
    done = orch(work, db, "run", str(spec), "--variant", "fixed", "--hosts", hosts, "--set", f"port={port}", *pin)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{mode}: orch run exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    store = Store(f"sqlite:///{work / db}")
    runs = [store.record(r) for r in store.runs(None, None, 100)]
    seconds = [(_at(r["ended_at"]) - _at(r["started_at"])) for r in runs]
    gpu_seconds = sum(s * int(r["params"]["tp_size"]) for s, r in zip(seconds, runs))
    overhead = [s - r["metrics"]["startup_s"] - r["metrics"]["workload_s"] for s, r in zip(seconds, runs)]
    # where the overhead goes: up to the launch (flag check, port and GPU check, push, preflight,
    # patches) and after the server stopped (log, record, revert)
    before = [_event(r, "launched") - _at(r["started_at"]) for r in runs]
    after = [_at(r["ended_at"]) - _event(r, "stopped") for r in runs]
    ideal = gpu_seconds / (HOSTS * GPUS) if ideal is None else ideal
    result = {"wall": wall, "ideal": ideal, "efficiency": ideal / wall, "runs": len(runs),
              "overhead_mean": statistics.mean(overhead), "overhead_max": max(overhead)}
    print(f"{mode:13s} {len(runs)} runs  wall {wall:6.1f} s  ideal {ideal:6.1f} s  efficiency {ideal / wall:5.2f}  "
          f"overhead per run {result['overhead_mean']:.2f} s (max {result['overhead_max']:.2f} s; "
          f"{statistics.mean(before):.2f} s before the launch, {statistics.mean(after):.2f} s after the stop)")
    return result


def _event(run: dict, kind: str) -> float:
    return _at(next(e["at"] for e in run["events"] if e["kind"] == kind))


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=31000)
    args = parser.parse_args()
    missing = sshd.netns_missing()
    if missing:
        raise SystemExit(f"needs network namespaces and sshd (run as root): {missing}")
    with tempfile.TemporaryDirectory(prefix="orch-sweep-") as folder:
        work = Path(folder)
        (work / "fleet").mkdir()
        fleet = sshd.Fleet(work / "fleet", HOSTS)
        try:
            fleet.start()
            spec = project(work, fleet)
            print(f"== 16 runs (tp_size {'/'.join(map(str, TP_SIZES))}) on {HOSTS} rehearsal hosts of {GPUS} GPUs "
                  "over sshd ==")
            alone = sweep(work, fleet, spec, "one-per-host", args.port)
            # runs at once on a rehearsal host share its CPU cores and take longer: the slots' ideal
            # is the one-per-host runs' GPU-seconds, not their own (which would flatter them)
            slots = sweep(work, fleet, spec, "slots", args.port, alone["ideal"])
            print(f"slots / one-per-host wall: {slots['wall'] / alone['wall']:.2f} "
                  f"({alone['wall'] / slots['wall']:.2f}x faster); efficiency {slots['efficiency']:.2f} "
                  f"against {alone['efficiency']:.2f}")
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
