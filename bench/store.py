"""The store at scale: orch's reading commands as whole processes on a database of N realistic runs.

    python bench/store.py [--runs 1000,100000] [--db sqlite:///big.db] [--repeat 3] [--fill-only]
                          [--big-db sqlite:////tmp/readpath-100k.db] [--no-import]
                          [--baseline /path/to/another/checkout]

Fills the database (bulk INSERTs, in batches) up to each size in `--runs`, and at each size times
`orch --help`, `ls`, `ls --json`, `ls -n ALL --json`, `show`, `diff`, `compare` and `report` of one
1,000-run experiment (the last two where this orch has them) as whole processes (best of
`--repeat`), then `orch import` of a 64 MB server log (into a database made already, and into a
new one). Prints each figure per size, the growth from the first size to the last, and the
database's size per run. A run is of realistic size: 20 params,
10 metrics, 50 decode samples, 5 debug lines, a 2 KB launch script and a 20 KB compressed log.
`--baseline` times each command with another checkout of orch too (e.g. `git archive` of an earlier
commit), the two in turn, so both figures come from the same state of the machine. `--big-db`: a
database already filled to the largest size, only read (never filled or written); the smaller sizes
are filled in a temporary one.

The closing table gives per command its figure at each size, the growth, the goal, the figure
against the goal (x goal: under 1 meets it) and, with `--baseline`, the other checkout's figure at
the largest size and how many times faster this one is. Every command runs once untimed first, with
its bytecode cached in a temporary folder (an installed orch has its bytecode; a caller's
PYTHONDONTWRITEBYTECODE would add compiling every module of orch to each figure).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import func, insert, select  # noqa: E402

from orchestrator.store import metricjson  # noqa: E402
from orchestrator.store.database import DebugRow, LogRow, MetricRow, Run, SeriesRow, Store  # noqa: E402

EXPERIMENT_RUNS = 1000  # runs per experiment: `compare` and `report` read one of them
BATCH = 1000
CPU: dict[str, list[float]] = {}  # command -> CPU seconds of each of its runs
GOALS = {"--help": 0.3, "ls -n ALL --json": 3.0, "report": 3.0, "import 64 MB log": 2.0, "import, new db": 2.0}
METRICS = ("accept_len", "output_tok_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "req_s", "accept_rate",
           "spec_verify_ct", "gen_throughput")


def launch_script(rng: random.Random) -> str:
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    while sum(len(line) + 1 for line in lines) < 2048:
        lines.append(f"export VAR_{len(lines)}={rng.getrandbits(64):x}  # launch setting")
    return "\n".join(lines)[:2048]


def compressed_log(rng: random.Random) -> tuple[int, bytes]:
    """A server log whose zlib form is about 20 KB (one made, stored for every run)."""
    lines, data = [], b""
    while len(zlib.compress(data, 6)) < 20 * 1024:
        lines.extend(f"[2026-10-30 12:00:{i % 60:02d} TP0] Decode batch, #running-req: {rng.randint(1, 64)}, "
                     f"#token: {rng.randint(100, 400000)}, accept len: {rng.uniform(1, 4):.2f}, "
                     f"gen throughput (token/s): {rng.uniform(50, 9000):.2f}" for i in range(200))
        data = ("\n".join(lines) + "\n").encode()
    return len(data), zlib.compress(data, 6)


def rows_of(run_id: int, rng: random.Random, script: str) -> dict[type, list[dict]]:
    """One run and its children as column values. Configurations: steps x topk x draft tokens, 3 repeats."""
    config = (run_id // 3) % 64
    params = {"steps": 1 + config % 4, "topk": 1 + config // 4 % 4, "num_draft_tokens": 2 + config // 16,
              **{f"p{i:02d}": f"value-{i}" for i in range(17)}}
    metrics = {name: rng.uniform(1, 100) for name in METRICS}
    metrics["accept_len"] = 1 + params["steps"] * 0.4 + rng.uniform(-0.1, 0.1)
    return {
        Run: [{"id": run_id, "uid": f"{run_id:08x}-bench", "experiment": f"exp{(run_id - 1) // EXPERIMENT_RUNS}",
               "variant": f"s{params['steps']}-k{params['topk']}-d{params['num_draft_tokens']}", "host": f"h{run_id % 8}",
               "status": "succeeded", "repeat": run_id % 3, "spec_path": "experiments/eagle.yaml",
               "spec": {"name": "eagle"}, "params": params, "env": {"CUDA_VISIBLE_DEVICES": "0"}, "command": script,
               "flags": [], "error": None, "diagnosis": None, "controller": "bench:1", "username": "bench",
               "started_at": f"2026-10-30T12:00:00.{run_id:06d}", "ended_at": "2026-10-30T12:05:00",
               "plan_key": f"k{config}-{run_id % 3}", "fingerprint": "f"}],
        MetricRow: [{"run_id": run_id, "name": name, "value": value, "source": "log", "note": ""}
                    for name, value in metrics.items()],
        SeriesRow: [{"run_id": run_id, "kind": "decode", "seq": i, "time": f"2026-10-30 12:0{i // 10}:00",
                     "values": {"running_req": 8, "token": 1000 + i, "accept_len": round(rng.uniform(1, 4), 2),
                                "gen_throughput": round(rng.uniform(50, 9000), 1)}} for i in range(50)],
        DebugRow: [{"run_id": run_id, "seq": i, "text": f"[EAGLE3-DEBUG] hidden_states step={i}",
                    "fields": {"step": str(i)}} for i in range(5)],
    }


def fill(store: Store, upto: int) -> float:
    """Bulk-insert runs until the database holds `upto`; the seconds it took."""
    start = time.perf_counter()
    rng = random.Random(0)
    script = launch_script(rng)
    size, blob = compressed_log(rng)
    with store.engine.connect() as conn:
        have = conn.execute(select(func.count()).select_from(Run)).scalar() or 0
    for first in range(have + 1, upto + 1, BATCH):
        batch: dict[type, list[dict]] = {}
        for run_id in range(first, min(first + BATCH, upto + 1)):
            for table, values in rows_of(run_id, rng, script).items():
                batch.setdefault(table, []).extend(values)
            batch.setdefault(LogRow, []).append({"run_id": run_id, "size": size, "data": blob})
        with store.engine.begin() as conn:
            for table in (Run, MetricRow, SeriesRow, DebugRow, LogRow):
                columns = set(table.__table__.c.keys())  # type: ignore[attr-defined]
                conn.execute(insert(table), [{k: v for k, v in row.items() if k in columns} for row in batch[table]])
            metricjson.refresh(conn, [row["id"] for row in batch[Run]])  # as every write of metric rows does
        print(f"  filled {min(first + BATCH - 1, upto):,} runs ({time.perf_counter() - start:.0f} s)",
              end="\r", flush=True)
    print()
    return time.perf_counter() - start


BYTECODE = tempfile.mkdtemp(prefix="orch-bench-bytecode-")  # per checkout: its own cached bytecode


def child_env(root: Path = ROOT) -> dict[str, str]:
    """This checkout (or `root`) first on the path of the commands timed (then whatever the caller set),
    its bytecode written to and read from a folder of its own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p),
           "COLUMNS": "200", "PYTHONPYCACHEPREFIX": os.path.join(BYTECODE, str(abs(hash(str(root)))))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def orch(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli", "--db", db, *args]


def timed(command: list[str], repeat: int, cwd: Path, roots: tuple[Path, ...] = (ROOT,),
          warm: bool = True) -> list[float | str]:
    """Per checkout in `roots`, the best wall-clock seconds of `repeat` runs, the checkouts in turn
    (each run's CPU seconds too: on a shared machine the wall clock also counts waiting for a core)."""
    best: list[float | str] = [float("inf")] * len(roots)
    for root in roots if warm else ():  # untimed: the bytecode written, the database's pages read once
        subprocess.run(command, cwd=cwd, capture_output=True, timeout=600, env=child_env(root))
    for _ in range(repeat):
        for n, root in enumerate(roots):
            if isinstance(best[n], str):
                continue
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(command, cwd=cwd, capture_output=True, timeout=600, env=child_env(root))
            best[n] = min(best[n], time.perf_counter() - start)  # type: ignore[type-var]
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            CPU.setdefault(f"{root} {' '.join(command)}", []).append(
                after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if done.returncode != 0:
                best[n] = f"exit {done.returncode}: {(done.stderr or done.stdout).decode().strip().splitlines()[-1:]}"
    return best


def has_command(name: str, cwd: Path) -> bool:
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", name, "--help"], cwd=cwd, capture_output=True,
                          env=child_env())
    return done.returncode == 0


def commands(db: str, runs: int, work: Path) -> dict[str, list[str]]:
    experiment = f"exp{(runs - 1) // EXPERIMENT_RUNS}"
    found = {
        "--help": [sys.executable, "-m", "orchestrator.cli", "--help"],
        "ls": orch(db, "ls"),
        "ls --json": orch(db, "ls", "--json"),
        "ls -n ALL --json": orch(db, "ls", "-n", str(runs), "--json"),
        "show": orch(db, "show", "last"),
        "diff": orch(db, "diff", "last~3", "last"),
    }
    if has_command("compare", work):
        found["compare"] = orch(db, "compare", experiment)
    if has_command("report", work):
        found["report"] = orch(db, "report", experiment, "-o", str(work / "report.html"))
    return found


IMPORTS = {"import 64 MB log": "import-{n}.db", "import, new db": "import-new-{n}.db"}
SMALL_LOG = ROOT / "tests" / "fixtures" / "logs" / "sglang_eagle3_debug.log"


def import_log(work: Path, repeat: int, roots: tuple[Path, ...]) -> dict[str, list[float | str]]:
    """`orch import` of a 64 MB log, per checkout: into a database that checkout made already (by an
    untimed import of a small log: the common case, a team's or a user's orch.db) and into a new one
    (made by the import itself); each repeat on a database made afresh."""
    sys.path.insert(0, str(ROOT / "bench"))
    from logparse import write_log

    log = work / "server.log"
    if not log.exists():
        write_log(log, 64, 3)
    found: dict[str, list[float | str]] = {name: [] for name in IMPORTS}
    for name, file in IMPORTS.items():
        for n, root in enumerate(roots):
            db = work / file.format(n=n)
            best: float | str = float("inf")
            for _ in range(repeat):
                for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
                    path.unlink(missing_ok=True)
                if file.startswith("import-{"):
                    subprocess.run(orch(f"sqlite:///{db}", "import", str(SMALL_LOG)), cwd=work, capture_output=True,
                                   timeout=600, env=child_env(root), check=True)  # else "existing" times a new one
                value = timed(orch(f"sqlite:///{db}", "import", str(log)), 1, work, (root,), warm=False)[0]
                best = value if isinstance(value, str) else min(best, value)  # type: ignore[type-var]
            found[name].append(best)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="1000,100000", help="sizes to fill to and time at, comma-separated")
    parser.add_argument("--db", help="database URL (default: an SQLite file in a temp folder, kept between sizes)")
    parser.add_argument("--big-db", help="an SQLite database already holding the largest size: only read")
    parser.add_argument("--repeat", type=int, default=3, help="time each command this many times, keep the best")
    parser.add_argument("--fill-only", action="store_true", help="only fill --db to the largest size (to time later)")
    parser.add_argument("--no-import", action="store_true", help="skip the `orch import` of a 64 MB log")
    parser.add_argument("--baseline", type=Path, help="another checkout of orch: each command timed with it too, in turn")
    args = parser.parse_args()
    if args.baseline and not (args.baseline / "orchestrator" / "cli" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: not a checkout of orch (no orchestrator/cli there)")
    roots = (ROOT, args.baseline.resolve()) if args.baseline else (ROOT,)
    sizes = sorted(int(n) for n in args.runs.split(","))
    with tempfile.TemporaryDirectory(prefix="orch-bench-store-") as folder:
        work = Path(folder)
        db = args.db or f"sqlite:///{work / 'orch.db'}"
        figures: dict[Path, dict[int, dict[str, float | str]]] = {root: {} for root in roots}
        cpus: dict[Path, dict[int, dict[str, float]]] = {root: {} for root in roots}  # least CPU seconds
        per_run: dict[int, float] = {}  # KiB of database per run
        if args.fill_only:
            print(f"{sizes[-1]:,} runs: fill {fill(Store(db), sizes[-1]):.1f} s")
            return
        for runs in sizes:
            url = args.big_db if args.big_db and runs == sizes[-1] else db
            held = _held(url)
            if held is None or held < runs:
                print(f"{runs:,} runs: fill {fill(Store(url), runs):.1f} s")
            elif held > runs:
                parser.error(f"{url} holds {held:,} runs, more than {runs:,}: give --runs up to {held:,}")
            cmds = commands(url, runs, work)
            CPU.clear()  # the same command lines at every size
            times = {name: timed(command, args.repeat, work, roots) for name, command in cmds.items()}
            for n, root in enumerate(roots):
                figures[root][runs] = {name: found[n] for name, found in times.items()}
                cpus[root][runs] = {name: min(CPU.get(f"{root} " + " ".join(command), [0.0]))
                                    for name, command in cmds.items()}
            per_run[runs] = _size(url) / runs / 1024
            print(f"  {runs:,} runs timed; database {per_run[runs] * runs / 1024:,.0f} MiB, "
                  f"{per_run[runs]:.1f} KiB per run")
        if not args.no_import:
            for name, values in import_log(work, args.repeat, roots).items():
                for n, (root, value) in enumerate(zip(roots, values)):
                    command = orch(f"sqlite:///{work / IMPORTS[name].format(n=n)}", "import", str(work / "server.log"))
                    figures[root][sizes[-1]][name] = value
                    cpus[root][sizes[-1]][name] = min(CPU.get(f"{root} " + " ".join(command), [0.0]))
        report(figures, cpus, roots, per_run)


def _held(url: str) -> int | None:
    """How many runs the SQLite database at `url` holds (None: no such file yet), read only."""
    import sqlite3

    path = Path(url.removeprefix("sqlite:///"))
    if not url.startswith("sqlite:///") or not path.exists():
        return None
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM run").fetchone()[0])


def _size(url: str) -> float:
    """The SQLite file's bytes with its WAL (rows not yet checkpointed into the file); 0 for others."""
    path = Path(url.removeprefix("sqlite:///"))
    if not url.startswith("sqlite:///") or not path.exists():
        return 0.0
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def report(figures: dict[Path, dict[int, dict[str, float | str]]], cpus: dict[Path, dict[int, dict[str, float]]],
           roots: tuple[Path, ...], per_run: dict[int, float]) -> None:
    """Per command: wall seconds (CPU seconds: on a busy machine the wall clock also counts waiting
    for a core) at each size, the growth from the first size to the last, the goal, the largest
    size's figure against the goal, and with a baseline its figure there and the speed-up."""
    ours = figures[ROOT]
    sizes = sorted(ours)
    last = sizes[-1]

    def cell(value: float | str | None, cpu: float | None) -> str:
        return f"{value:.3f}s ({cpu:.2f}s)" if isinstance(value, float) else "-" if value is None else "err"

    header = f"{'command':18} " + " ".join(f"{f'{n:,} wall (cpu)':>19}" for n in sizes)
    header += f" {'growth':>7} {'goal':>7} {'x goal':>7}"
    if len(roots) > 1:
        header += f" {f'baseline {last:,}':>21} {'faster':>7}"
    print("\n" + header)
    names = list(dict.fromkeys(name for n in sizes for name in ours[n]))
    for name in names:
        values = [ours[n].get(name) for n in sizes]
        line = f"{name:18} " + " ".join(f"{cell(v, cpus[ROOT][n].get(name)):>19}" for n, v in zip(sizes, values))
        first, final = values[0], values[-1]
        goal = GOALS.get(name, 0.5)
        growth = f"{final / first:6.2f}x" if isinstance(first, float) and isinstance(final, float) else ""
        against = f"{final / goal:6.2f}x" if isinstance(final, float) else ""
        line += f" {growth:>7} {f'< {goal:g} s':>7} {against:>7}"
        if len(roots) > 1:
            theirs = figures[roots[-1]][last].get(name)
            faster = f"{theirs / final:6.2f}x" if isinstance(theirs, float) and isinstance(final, float) else ""
            line += f" {cell(theirs, cpus[roots[-1]][last].get(name)):>21} {faster:>7}"
        print(line)
    print("database per run: " + ", ".join(f"{per_run[n]:.1f} KiB at {n:,} runs" for n in sizes if n in per_run))
    if len(roots) > 1:
        print(f"baseline: {roots[-1]}")


if __name__ == "__main__":
    main()
