"""Sweep benchmark: 16 rehearsal runs (tp_size 1, 2, 4, 8, four of each) on 2 hosts of 8 GPUs.

As root: the two hosts are network namespaces with their own sshd (tests/sshd.py), so their
servers' ports never meet (two local-transport hosts on one machine would both start slot 0 on
the plan's port). The same sweep runs in several modes, each in its own process as `orch run`
would (what `orch run` does, with a Reporter that keeps the stages' times):

  slots        several runs at once per host, as their tp_size fits its GPUs (the queue and slots)
  one-per-host each run pins itself (env CUDA_VISIBLE_DEVICES), so runs alone on its host, as
               every run did before the slots
  reuse        slots, with server reuse (the repeats of a plan share a server); the other modes
               set `fresh_server: true`, so each run goes through every stage

and prints, for each: wall time; the ideal (GPU-seconds of the runs / the GPUs of the hosts: each
run's time x its tp_size, from the one-per-host runs: runs at once on a rehearsal host share its
CPU and take longer); efficiency = ideal / wall; the orchestration overhead per run (its time
minus server start and workload) with its median per stage (the Reporter's `stage` hook), the host
commands per run (and how many start the host's Python) and each host's setup (connect, lock,
recovery, rehearsal install); then each mode against one-per-host. SWEEP_TRACE=FILE writes every
host operation (run, stage, operation, argument, seconds) of the last sweep to FILE, and of each
sweep to FILE.<mode>-<transport>-<sweep>.

With --repeat N the sweeps of a mode run one after another on the same hosts (their workdirs, run
folders and journals kept), as a user's sweeps do; what grows from one to the next is what orch
leaves behind and reads again. After them, per mode and sweep: the host commands per run (fresh
servers and reused ones apart: how many runs reuse a server depends on timing), the recovery
step's time and host commands per host, and the median orchestration of a run on a fresh server,
each as a ratio to the first sweep's.

    sudo .venv/bin/python bench/sweep.py [--modes one-per-host,slots,reuse,slots/exec] [--repeat N]

(a mode with "/exec" runs host commands on an exec channel each, as before resident shells: the
same sweep before and after, side by side)
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

HOSTS, GPUS = 2, 8
TP_SIZES = (1, 2, 4, 8)
MODES = ("one-per-host", "slots")  # and "reuse": slots with server reuse (repeats share a server)
TRACE: list[list[Any]] | None = [] if os.environ.get("SWEEP_TRACE") else None  # every host operation, to a file
# the stages that are the server's own time, not orchestration: server start and workload
SERVER_STAGES = ("launch", "wait ready", "workload")


def project(work: Path, fleet: Any) -> Path:
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
    # every run its own server (the whole of a run measured): mode "reuse" sets it back
    (work / "experiments" / "fresh.yaml").write_text(spec.read_text() + "fresh_server: true\n")
    return spec


# ---- the measured sweep, in its own process (as `orch run`) ---------------------------------------

_where: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("where", default=("", "host setup"))


class Timing:
    """A Reporter that keeps when each run entered each stage (and nothing else)."""

    def __init__(self) -> None:
        self.stages: dict[str, list[tuple[str, float]]] = defaultdict(list)
        self.ended: dict[str, float] = {}

    def message(self, label: str, text: str) -> None:
        if text.startswith("run ") and " " in text[4:] and label in self.stages:
            self.ended[label] = time.monotonic()  # the last line of a run: "run N succeeded"

    def warning(self, label: str, text: str) -> None:
        return None

    def transfer(self, label: str) -> Callable[[str, int], None]:
        return lambda kind, amount: None

    def stage(self, label: str, stage: Any) -> None:
        self.stages[label].append((stage.value, time.monotonic()))
        _where.set((label, stage.value))  # the run's own task: the host commands that follow are this stage's

    def known(self, label: str, values: dict[str, Any]) -> None:
        return None


def _counting(cls: type, python: str, ops: Counter, pythons: Counter) -> None:
    """Count each host operation of `cls` by (run, stage), and the commands that start `python`."""
    for name in ("run", "read_file", "write_file", "stat", "put_tree", "put_file", "forward"):
        method = getattr(cls, name)

        def wrap(method: Any = method, name: str = name) -> Any:
            async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                where = _where.get()
                ops[where] += 1
                if name == "run" and python in str(args[0] if args else kwargs.get("command", "")):
                    pythons[where] += 1
                started = time.monotonic()
                try:
                    return await method(self, *args, **kwargs)
                finally:
                    if TRACE is not None:
                        TRACE.append([*where, name, str(args[0])[:160] if args else "", time.monotonic() - started])
            return counted
        setattr(cls, name, wrap())


def _timed(module: Any, name: str, phase: str, setup: dict[str, list[float]]) -> None:
    """Time each call of `module.name` (a host-setup step) into `setup[phase]`; its host commands
    are counted as the phase's (run "", stage `phase`)."""
    inner = getattr(module, name)

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        token = _where.set(("", phase))
        try:
            return await inner(*args, **kwargs)
        finally:
            _where.reset(token)
            setup[phase].append(time.monotonic() - started)
    setattr(module, name, timed)


async def _measured(spec: str, inventory: str, db: str, hosts: list[str], overrides: list[str]) -> dict[str, Any]:
    try:  # the plans' loading moved to the library face's api/
        from orchestrator.api.runs import load_plans
    except ImportError:
        import orchestrator
        load_plans = orchestrator._plans
    from orchestrator.host import lifecycle, lock, rehearsal
    from orchestrator.remote.reconnecting import ReconnectingConnection
    from orchestrator.run import plankey
    try:  # the queue's fan-out moved out of execute.py
        from orchestrator.run.sweep import run_all
    except ImportError:
        from orchestrator.run.execute import run_all
    from orchestrator.store.database import Store

    ops: Counter = Counter()
    pythons: Counter = Counter()
    setup: dict[str, list[float]] = defaultdict(list)
    _counting(ReconnectingConnection, sys.executable, ops, pythons)
    _timed(lifecycle, "open_session", "connect", setup)
    _timed(lock.HostLock, "acquire", "lock", setup)
    _timed(lifecycle, "recover", "recovery", setup)
    _timed(rehearsal, "install", "rehearsal install", setup)
    timing = Timing()
    started = time.monotonic()
    loaded, plans, chosen = load_plans(spec, inventory, hosts, overrides, ("fixed",))
    plans = plankey.fingerprinted(loaded, plans)
    outcomes = await run_all(loaded, plans, chosen, Store(db), timing)
    wall = time.monotonic() - started
    bad = [o for o in outcomes if o.status != "succeeded"]
    runs = {}
    for label, entered in timing.stages.items():
        ends = [at for _, at in entered[1:]] + [timing.ended.get(label, entered[-1][1])]
        seconds: dict[str, float] = defaultdict(float)
        for (stage, at), end in zip(entered, ends):
            seconds[stage] += end - at
        runs[label] = {"stages": seconds, "ops": sum(n for (lb, _), n in ops.items() if lb == label),
                       "pythons": sum(n for (lb, _), n in pythons.items() if lb == label),
                       "ops_by_stage": {st: n for (lb, st), n in ops.items() if lb == label},
                       "pythons_by_stage": {st: n for (lb, st), n in pythons.items() if lb == label}}
    if TRACE is not None:
        Path(os.environ["SWEEP_TRACE"]).write_text(json.dumps(TRACE))
        Path(f"{os.environ['SWEEP_TRACE']}.{Path(db).stem}").write_text(json.dumps(TRACE))
    return {"wall": wall, "failed": [f"{o.variant}@{o.host}: {o.error}" for o in bad], "runs": runs,
            "setup": setup, "setup_ops": sum(n for (lb, _), n in ops.items() if lb == ""),
            "setup_pythons": sum(n for (lb, _), n in pythons.items() if lb == ""),
            "phase_ops": {st: n for (lb, st), n in ops.items() if lb == ""}}


def child(args: argparse.Namespace) -> None:
    if args.exec_channels:  # as before resident shells: an exec channel (a login shell) per host command
        from orchestrator.remote import ssh

        async def none(self: Any) -> None:
            self._exec_only = True
        ssh.SSHConnection._start_resident = none  # type: ignore[method-assign]
    result = asyncio.run(_measured(args.spec, args.inventory, args.db, args.hosts.split(","), args.set or []))
    Path(args.out).write_text(json.dumps(result))


# ---- the bench -----------------------------------------------------------------------------------


def sweep(work: Path, fleet: Any, spec: Path, mode: str, port: int, tag: str) -> dict[str, Any]:
    """One sweep in its own process: its wall time, each run's stages and host commands. `mode`
    with "/exec" after it: host commands on exec channels, as before resident shells."""
    mode, _, transport = mode.partition("/")
    from orchestrator.store.database import Store

    db = work / f"{mode}-{transport}-{tag}.db"
    out = work / f"{mode}-{transport}-{tag}.json"
    hosts = ",".join(s.name for s in fleet.servers)
    pin = ["--set", f"env.CUDA_VISIBLE_DEVICES={','.join(map(str, range(GPUS)))}"] if mode == "one-per-host" else []
    spec = spec if mode == "reuse" else spec.with_name("fresh.yaml")
    env = {**os.environ, "HOME": str(work), "PYTHONPATH": str(ROOT)}
    env.pop("SSH_AUTH_SOCK", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", "--spec", str(spec), "--inventory",
                           str(work / "inventory.yaml"), "--db", f"sqlite:///{db}", "--hosts", hosts, "--out", str(out),
                           "--set", f"port={port}", *pin,
                           *(["--exec-channels"] if transport == "exec" else [])], cwd=work, env=env,
                          capture_output=True, text=True, timeout=1200)
    process_wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the sweep exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    result = json.loads(out.read_text())
    if result["failed"]:
        raise SystemExit(f"{mode}: {len(result['failed'])} run(s) failed: {result['failed'][:3]}")
    store = Store(f"sqlite:///{db}")
    tp = {str(r.id): int(r.params["tp_size"]) for r in store.runs(None, None, 100)}
    for label, run in result["runs"].items():
        run["tp"] = tp[label.rsplit("#", 1)[1]]
        run["seconds"] = sum(run["stages"].values())
        run["server"] = sum(run["stages"].get(s, 0.0) for s in SERVER_STAGES)
        run["overhead"] = run["seconds"] - run["server"]
        run["fresh"] = "launch" in run["stages"]  # its own server, not one an earlier run left up
    result["process_wall"] = process_wall
    return result


def report(mode: str, result: dict[str, Any], ideal: float) -> None:
    runs = list(result["runs"].values())
    wall = result["wall"]
    overhead = [r["overhead"] for r in runs]
    print(f"{mode:18s} {len(runs)} runs  wall {wall:6.1f} s (process {result['process_wall']:.1f} s)  ideal "
          f"{ideal:6.1f} s  efficiency {ideal / wall:5.2f}  overhead per run median {statistics.median(overhead):.2f} s "
          f"(mean {statistics.mean(overhead):.2f}, max {max(overhead):.2f} s)  host commands per run {statistics.median(r['ops'] for r in runs):.0f} "
          f"({statistics.median(r['pythons'] for r in runs):.0f} start the host's Python)")
    stages = list(dict.fromkeys(s for r in runs for s in r["stages"]))
    cells = []
    for stage in stages:
        median = statistics.median(r["stages"].get(stage, 0.0) for r in runs)
        n = statistics.median(r["ops_by_stage"].get(stage, 0) for r in runs)
        py = statistics.median(r["pythons_by_stage"].get(stage, 0) for r in runs)
        mark = "" if stage not in SERVER_STAGES else "*"
        cells.append(f"{stage}{mark} {median:.3f}s/{n:.0f}c" + (f"/{py:.0f}py" if py else ""))
    print("    per stage (median s / host commands / host Pythons; * server time):")
    for i in range(0, len(cells), 5):
        print("      " + "  ".join(cells[i:i + 5]))
    setup = "  ".join(f"{phase} {statistics.mean(t):.2f}s" for phase, t in result["setup"].items())
    print(f"    per host setup (mean): {setup}  ({result['setup_ops'] / HOSTS:.0f} host commands, "
          f"{result['setup_pythons'] / HOSTS:.0f} Pythons per host)")


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def in_a_row(mode: str, sweeps: list[dict[str, Any]]) -> None:
    """What each sweep of `mode` on the same hosts cost, as a ratio to the first sweep's: nothing
    orch leaves on a host should make the next sweep's runs or recovery dearer."""
    def figures(result: dict[str, Any]) -> dict[str, float]:
        runs = list(result["runs"].values())
        fresh = [r for r in runs if r["fresh"]]
        reused = [r for r in runs if not r["fresh"]]
        return {"ops": _median([r["ops"] for r in runs]), "fresh_ops": _median([r["ops"] for r in fresh]),
                "reused_ops": _median([r["ops"] for r in reused]), "fresh": len(fresh),
                "recovery_s": statistics.mean(result["setup"].get("recovery", [0.0])),
                "recovery_ops": result["phase_ops"].get("recovery", 0) / HOSTS,
                "fresh_overhead_s": _median([r["overhead"] for r in fresh])}
    first = figures(sweeps[0])

    def ratio(f: dict[str, float], key: str) -> str:
        return f"({f[key] / first[key]:.2f})" if first[key] else "(-)"
    print(f"{mode}: {len(sweeps)} sweeps in a row on the same hosts (ratio to the first sweep's in brackets)")
    for i, result in enumerate(sweeps):
        f = figures(result)
        print(f"  sweep {i + 1}: host commands per run {f['ops']:.0f} {ratio(f, 'ops')}, on a fresh server "
              f"{f['fresh_ops']:.0f} {ratio(f, 'fresh_ops')}, on a reused one {f['reused_ops']:.0f} {ratio(f, 'reused_ops')} "
              f"({f['fresh']:.0f} fresh servers); recovery {f['recovery_s']:.2f} s {ratio(f, 'recovery_s')}, "
              f"{f['recovery_ops']:.0f} host commands per host {ratio(f, 'recovery_ops')}; orchestration of a run on a "
              f"fresh server {f['fresh_overhead_s']:.2f} s {ratio(f, 'fresh_overhead_s')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=31000)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--repeat", type=int, default=1, help="sweeps of each mode, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("spec", "inventory", "db", "hosts", "out"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    parser.add_argument("--set", action="append", help=argparse.SUPPRESS)
    parser.add_argument("--exec-channels", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    import sshd

    missing = sshd.netns_missing()
    if missing:
        raise SystemExit(f"needs network namespaces and sshd (run as root): {missing}")
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="orch-sweep-") as folder:
        work = Path(folder)
        (work / "fleet").mkdir()
        fleet = sshd.Fleet(work / "fleet", HOSTS)
        try:
            fleet.start()
            spec = project(work, fleet)
            print(f"== 16 runs (tp_size {'/'.join(map(str, TP_SIZES))}) on {HOSTS} rehearsal hosts of {GPUS} GPUs "
                  f"over sshd; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores ==")
            history: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for i in range(args.repeat):
                results = {mode: sweep(work, fleet, spec, mode, args.port, str(i)) for mode in modes}
                for mode, result in results.items():
                    history[mode].append(result)
                # runs at once on a rehearsal host share its CPU cores and take longer: the ideal is the
                # GPU-seconds (each run's time x its tp_size) of the runs alone on their host when
                # there are such, / the hosts' GPUs
                base = next((r for m, r in results.items() if m.startswith("one-per-host")), next(iter(results.values())))
                ideal = sum(r["seconds"] * r["tp"] for r in base["runs"].values()) / (HOSTS * GPUS)
                for mode, result in results.items():
                    report(mode, result, ideal)
                for mode in results:
                    if mode != "one-per-host" and "one-per-host" in results:
                        s, a = results[mode], results["one-per-host"]
                        print(f"{mode} / one-per-host wall: {s['wall'] / a['wall']:.2f} "
                              f"({a['wall'] / s['wall']:.2f}x faster)")
                print(f"load average now {os.getloadavg()[0]:.1f} (the machine is shared: compare modes of one run)")
            if args.repeat > 1:
                for mode, sweeps in history.items():
                    in_a_row(mode, sweeps)
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
