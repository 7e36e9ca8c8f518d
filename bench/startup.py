"""Start-up of `orch run experiments/eagle_debug.yaml --dry-run`: the whole command, wall clock.

    python bench/startup.py [--runs 9] [--against REV]

Each run is a fresh process (`python -P`: the tree on PYTHONPATH, not the folder, is imported; the
database a temporary file). With `--against REV` the same command of that revision's tree (exported
with `git archive`, put first on PYTHONPATH) runs alternately with this tree's, so both see the same load on a shared machine; the
medians and their ratio are printed. Also printed: the modules each imports that only writing runs
needs (SQLAlchemy, SQLModel).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ("run", "experiments/eagle_debug.yaml", "--dry-run")
# the command, then one line naming the ORM modules it loaded
PROBE = ("import runpy, sys\n"
         "sys.argv = ['orch', *sys.argv[1:]]\n"
         "try:\n    runpy.run_module('orchestrator.cli', run_name='__main__')\n"
         "except SystemExit:\n    pass\n"
         "print('@@ORM', *[m for m in ('sqlalchemy', 'sqlmodel') if m in sys.modules], file=sys.stderr)\n")


def timed(tree: Path, db: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-P", "-c", PROBE, "--db", f"sqlite:///{db}", *COMMAND], cwd=ROOT,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    took = time.perf_counter() - start
    orm = next((line[5:].strip() for line in done.stderr.splitlines() if line.startswith("@@ORM")), "?")
    return took, orm or "none"


def exported(rev: str, folder: Path) -> Path:
    archive = folder / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), rev, "orchestrator"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "tree", filter="data")
    return folder / "tree"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--against", help="a git revision to compare with, run alternately")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-startup-") as tmp:
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = exported(args.against, Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in trees}
        orm: dict[str, str] = {}
        timed(ROOT, Path(tmp) / "warm.db")  # the first run fills the bytecode caches
        for i in range(args.runs):
            for name, tree in trees.items():
                took, orm[name] = timed(tree, Path(tmp) / f"{i}-{len(times[name])}.db")
                times[name].append(took)
    for name, found in times.items():
        print(f"{name:>12}: dry-run start-up median {statistics.median(found):.3f} s over {len(found)} runs "
              f"(min {min(found):.3f} s); ORM loaded: {orm[name]}")
    if args.against:
        ratio = statistics.median(times["this tree"]) / statistics.median(times[args.against])
        print(f"ratio this tree / {args.against}: {ratio:.2f}")


if __name__ == "__main__":
    main()
