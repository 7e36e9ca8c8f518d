"""`orch import` of a big SGLang log against a plain Python scan of the same file, alternated.

    python bench/logimport.py [--size-mb 1024] [--runs 3] [--kinds decode,mixed] [--against REV]

Writes each log into a temporary folder (deleted afterwards): `decode`, made only of decode lines
(a long run's log at its busiest), and `mixed`, bench/logparse.py's mix of a busy server (prefill
and decode lines, debug lines, warnings and access lines). Each run is a fresh process: the plain
scan (`for line in f: if b"accept len" in line: n += 1`), then `orch import` into a fresh SQLite
file, alternately, so both see the same load on a shared machine. Prints per log the medians, their
ratio and the importing process's peak RSS (its own, from wait4). With `--against REV` that
revision's `orch import` (its tree exported with `git archive`, first on PYTHONPATH) runs in the
same rounds too.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from logparse import make_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCAN = ("import sys\nn = 0\nwith open(sys.argv[1], 'rb') as f:\n    for line in f:\n"
        "        if b'accept len' in line:\n            n += 1\nprint(n)\n")
HEAD = (b"[2026-10-30 12:00:00] server_args=ServerArgs(model_path='m', tp_size=8)\n"
        b"[2026-10-30 12:00:00] The server is fired up and ready to roll!\n")


def decode_block(rng: random.Random, lines: int) -> bytes:
    """Decode lines as SGLang 0.5 prints them (shared/reference/sglang.md), with varying numbers."""
    out = []
    for i in range(lines):
        ts = f"2026-10-30 {12 + i // 360000 % 12:02d}:{i // 6000 % 60:02d}:{i // 100 % 60:02d}"
        out.append(f"[{ts} TP0] Decode batch, #running-req: {rng.randint(1, 64)}, #token: {rng.randint(100, 400000)}, "
                   f"token usage: {rng.random():.2f}, accept len: {rng.uniform(1, 4):.2f}, accept rate: "
                   f"{rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(50, 9000):.2f}, "
                   f"#queue-req: {rng.randint(0, 20)}")
    return ("\n".join(out) + "\n").encode()


def write_log(path: Path, kind: str, size_mb: int) -> None:
    rng = random.Random(0)
    blocks = [decode_block(rng, 20000) if kind == "decode" else make_block(rng, 20000, 3) for _ in range(8)]
    with open(path, "wb") as f:
        f.write(HEAD)
        written, i = len(HEAD), 0
        while written < size_mb << 20:
            f.write(blocks[i % len(blocks)])
            written += len(blocks[i % len(blocks)])
            i += 1


def timed(command: list[str], tree: Path = ROOT) -> tuple[float, int, str, float]:
    """Wall seconds, peak RSS (KiB) of the process, its stdout, its CPU seconds (user and system:
    on a shared machine the wall clock says as much about the others' load as about this code)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                 env={**os.environ, "PYTHONPATH": str(tree)})
        _, status, usage = os.wait4(child.pid, 0)
        took = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        said = out.read().decode(errors="replace")
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {child.returncode}: {said[-2000:]}")
    return took, usage.ru_maxrss, said, usage.ru_utime + usage.ru_stime


def exported(rev: str, folder: Path) -> Path:
    archive = folder / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev, "orchestrator"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "tree", filter="data")
    return folder / "tree"


def bench(kind: str, size_mb: int, runs: int, folder: Path, trees: dict[str, Path]) -> None:
    log = folder / f"{kind}.log"
    write_log(log, kind, size_mb)
    mb = log.stat().st_size / 1e6
    scans: list[float] = []
    scan_cpu: list[float] = []
    imports: dict[str, list[float]] = {name: [] for name in trees}
    import_cpu: dict[str, list[float]] = {name: [] for name in trees}
    rss: dict[str, list[int]] = {name: [] for name in trees}
    for i in range(runs):
        took, _, _, cpu = timed([sys.executable, "-c", SCAN, str(log)])
        scans.append(took)
        scan_cpu.append(cpu)
        for name, tree in trees.items():
            db = folder / f"{kind}-{i}.db"
            took, peak, said, cpu = timed([sys.executable, "-P", "-m", "orchestrator.cli", "--db", f"sqlite:///{db}",
                                           "import", str(log)], tree)
            imports[name].append(took)
            import_cpu[name].append(cpu)
            rss[name].append(peak)
            for made in folder.glob(f"{db.name}*"):
                made.unlink()
    scan = statistics.median(scans)
    print(f"{kind}: {mb:.0f} MB; {said.splitlines()[0]}")
    print(f"  plain scan   median {scan:6.2f} s ({mb / scan:5.0f} MB/s) over {runs}: {', '.join(f'{s:.2f}' for s in scans)}; "
          f"CPU {statistics.median(scan_cpu):.2f} s")
    for name, found in imports.items():
        imported = statistics.median(found)
        print(f"  orch import ({name}) median {imported:6.2f} s ({mb / imported:5.0f} MB/s) over {runs}: "
              f"{', '.join(f'{s:.2f}' for s in found)}; CPU {statistics.median(import_cpu[name]):.2f} s")
        print(f"    ratio import/scan {imported / scan:.1f}x (CPU {statistics.median(import_cpu[name]) / statistics.median(scan_cpu):.1f}x); "
              f"peak RSS of the import {max(rss[name]) / 1024:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kinds", default="decode,mixed")
    parser.add_argument("--against", help="a git revision whose orch import runs in the same rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-importbench-") as tmp:
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = exported(args.against, Path(tmp))
        for kind in args.kinds.split(","):
            bench(kind, args.size_mb, args.runs, Path(tmp), trees)


if __name__ == "__main__":
    main()
