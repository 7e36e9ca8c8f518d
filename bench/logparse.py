"""Throughput of `parse_log_bytes` on a big synthetic SGLang log, next to `grep -c 'Decode batch'`.

    python bench/logparse.py [--size-mb 1024]

Writes the log into a temporary folder (deleted afterwards), reads it into memory, times the
parser on one core (best of 3, wall clock and process CPU time) and one `LC_ALL=C grep -c` run on the same file, and prints MB/s.
The mix per 100 lines follows a busy server with many short requests: `--stats-lines` (default 3)
prefill + decode lines (2:1), 1 debug line, 3 other lines (warnings, cache flushes) and uvicorn
access lines for the rest. Parsing cost grows with the stats share (a few microseconds a line).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.engines.sglang.logs import parse_log_bytes  # noqa: E402

def mix(stats_lines: int) -> tuple[tuple[str, int], ...]:
    """Line kinds and their count per 300 lines."""
    return (("access", 3 * (96 - stats_lines)), ("prefill", 2 * stats_lines), ("decode", stats_lines),
            ("debug", 3), ("other", 9))
PATHS = ("/generate", "/v1/chat/completions", "/v1/completions", "/health", "/model_info")
OTHER = (
    "Cache flushed successfully!",
    "max_total_num_tokens=412340, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=64, "
    "context_len=131072, available_gpu_mem=11.53 GB",
    "Using default HuggingFace chat template with detected content format: string",
    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use '/server_info' instead.",
)


def make_block(rng: random.Random, lines: int, stats_lines: int) -> bytes:
    """`lines` log lines in the `mix` proportions, shuffled, with varying numbers."""
    kinds = [kind for kind, share in mix(stats_lines) for _ in range(share)]
    out = []
    for i in range(lines):
        ts = f"2026-10-30 {12 + i // 360000 % 12:02d}:{i // 6000 % 60:02d}:{i // 100 % 60:02d}"
        kind = rng.choice(kinds)
        if kind == "access":
            out.append(f'[{ts}] INFO:     127.0.0.1:{rng.randint(30000, 65000)} - "POST {rng.choice(PATHS)} HTTP/1.1" 200 OK')
        elif kind == "prefill":
            out.append(f"[{ts} TP0] Prefill batch, #new-seq: {rng.randint(1, 8)}, #new-token: {rng.randint(10, 8192)}, "
                       f"#cached-token: {rng.randint(0, 4096)}, token usage: {rng.random():.2f}, #running-req: "
                       f"{rng.randint(0, 64)}, #queue-req: {rng.randint(0, 20)}, #pending-token: {rng.randint(0, 9999)}, "
                       f"cuda graph: False, input throughput (token/s): {rng.uniform(100, 90000):.2f}")
        elif kind == "decode":
            out.append(f"[{ts} TP0] Decode batch, #running-req: {rng.randint(1, 64)}, #token: {rng.randint(100, 400000)}, "
                       f"token usage: {rng.random():.2f}, accept len: {rng.uniform(1, 4):.2f}, accept rate: "
                       f"{rng.random():.2f}, cuda graph: True, gen throughput (token/s): {rng.uniform(50, 9000):.2f}, "
                       f"#queue-req: {rng.randint(0, 20)}")
        elif kind == "debug":
            out.append(f"[{ts} TP0] [EAGLE3-DEBUG] hidden_states shape=torch.Size([{rng.randint(1, 64)}, 21504]) "
                       f"fc_in=21504 step={i}")
        else:
            out.append(f"[{ts} TP0] {rng.choice(OTHER)}")
    return ("\n".join(out) + "\n").encode()


def write_log(path: Path, size_mb: int, stats_lines: int) -> None:
    rng = random.Random(0)
    blocks = [make_block(rng, 20000, stats_lines) for _ in range(8)]
    target = size_mb * 1024 * 1024
    with open(path, "wb") as f:
        written = 0
        # a real log starts like this: the args, then (after loading and warm-up) the readiness line
        head = (b"[2026-10-30 12:00:00] server_args=ServerArgs(model_path='m', tp_size=8)\n"
                b"[2026-10-30 12:00:00] The server is fired up and ready to roll!\n")
        f.write(head)
        written += len(head)
        i = 0
        while written < target:
            block = blocks[i % len(blocks)]
            f.write(block)
            written += len(block)
            i += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--stats-lines", type=int, default=3, help="prefill + decode lines per 100 (max 96)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-logbench-") as tmp:
        path = Path(tmp) / "server.log"
        write_log(path, args.size_mb, args.stats_lines)
        data = path.read_bytes()
        mb = len(data) / 1e6
        best = best_cpu = float("inf")
        for _ in range(3):
            start, start_cpu = time.perf_counter(), time.process_time()
            report = parse_log_bytes(data)
            best = min(best, time.perf_counter() - start)
            best_cpu = min(best_cpu, time.process_time() - start_cpu)
        start = time.perf_counter()
        grep = subprocess.run(["grep", "-c", "Decode batch", str(path)], capture_output=True, text=True,
                              env={**os.environ, "LC_ALL": "C"}, check=True)
        grep_s = time.perf_counter() - start
    print(f"log: {mb:.0f} MB, {len(report.decode)} decode, {len(report.prefill)} prefill, "
          f"{len(report.debug_lines)} debug lines (grep counted {grep.stdout.strip()} decode lines)")
    print(f"parse_log_bytes: {mb / best:.0f} MB/s wall (best of 3, {best:.2f} s); "
          f"{mb / best_cpu:.0f} MB/s of CPU time ({best_cpu:.2f} s; differs from wall on a busy machine)")
    print(f"grep -c:         {mb / grep_s:.0f} MB/s ({grep_s:.2f} s)")
    print(f"ratio grep/parse: {(mb / grep_s) / (mb / best):.1f}x")


if __name__ == "__main__":
    main()
