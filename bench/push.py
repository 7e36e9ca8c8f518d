"""Checkpoint push benchmark: orch's push against `scp -r` and `rsync -a` over ssh, in one run.

Generates a checkpoint folder (default 4 x 512 MiB random shards) in a temp dir, starts a real
sshd on 127.0.0.1 (tests/sshd.py), and times, each into a fresh destination folder:
  scp -r                        (OpenSSH's default cipher, and with -c aes128-gcm@openssh.com)
  rsync -a -e ssh               (default cipher)
  orch push, SFTP               (SSHConnection.put_file: parallel SFTP writes, aes128-gcm)
  orch push, exec channels      (the reconnecting connection runs use: chunks on a command's stdin)
then an unchanged re-push. Everything it made is deleted afterwards.

    .venv/bin/python bench/push.py [--shards 4] [--shard-mib 512]
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import sshd  # noqa: E402
from orchestrator.host import push  # noqa: E402
from orchestrator.remote import connect  # noqa: E402


def make_checkpoint(folder: Path, shards: int, mib: int) -> int:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for i in range(shards):
        with open(folder / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "wb") as out:
            for _ in range(mib // 64):
                out.write(rng.integers(0, 2**63, 64 * 2**20 // 8, dtype=np.int64).tobytes())
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}\n')
    return sum(p.stat().st_size for p in folder.iterdir())


def ssh_options(server: sshd.Sshd, known: Path) -> list[str]:
    return ["-i", str(server.client_key), "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-F", "/dev/null"]


def timed(command: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{command[0]} failed ({done.returncode}): {done.stderr.strip()}")
    return time.monotonic() - started


def orch_push(host, src: Path, dest: Path, cache: Path, reconnect: bool) -> tuple[float, push.PushResult]:
    async def go():
        conn = await connect(host, reconnect=reconnect)
        try:
            started = time.monotonic()
            result = await push.push(conn, src, str(dest), cache=cache)
            return time.monotonic() - started, result
        finally:
            await conn.close()
    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=512)
    args = parser.parse_args()
    for tool in ("scp", "rsync"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (apt-get install openssh-client rsync)")
    work = Path(tempfile.mkdtemp(prefix="orch-bench-push-"))
    os.environ["HOME"] = str(work / "home")  # never the user's ~/.ssh
    (work / "home").mkdir()
    server = None
    try:
        src = work / "checkpoint"
        total = make_checkpoint(src, args.shards, args.shard_mib)
        gib = total / 2**30
        print(f"checkpoint: {args.shards} x {args.shard_mib} MiB + config.json = {gib:.2f} GiB at {src}")
        server = sshd.start(work / "sshd", "bench")
        known = work / "known_hosts"
        known.write_text(server.known_line())
        host = server.host(known, work / "host")
        where = f"{getpass.getuser()}@{server.address}"
        ssh = ssh_options(server, known)
        results: dict[str, float] = {}

        def fresh(name: str) -> Path:
            dest = work / "host" / name
            shutil.rmtree(dest, ignore_errors=True)
            dest.parent.mkdir(parents=True, exist_ok=True)
            return dest

        results["scp -r"] = timed(["scp", "-q", "-r", "-P", str(server.port), *ssh, str(src), f"{where}:{fresh('scp')}"])
        shutil.rmtree(work / "host" / "scp")
        results["scp -r -c aes128-gcm"] = timed(["scp", "-q", "-r", "-P", str(server.port), "-c", "aes128-gcm@openssh.com",
                                                 *ssh, str(src), f"{where}:{fresh('scp-gcm')}"])
        shutil.rmtree(work / "host" / "scp-gcm")
        rsh = " ".join(["ssh", "-p", str(server.port), *ssh])
        results["rsync -a"] = timed(["rsync", "-a", "-e", rsh, f"{src}/", f"{where}:{fresh('rsync')}/"])
        shutil.rmtree(work / "host" / "rsync")
        cache = work / "cache"
        push.local_manifest(src, cache)  # hashing is paid once per checkpoint version, not per push: timed apart
        results["orch push (sftp)"], first = orch_push(host, src, fresh("orch"), cache, reconnect=False)
        repush, again = orch_push(host, src, work / "host" / "orch", cache, reconnect=False)
        shutil.rmtree(work / "host" / "orch")
        results["orch push (exec channels)"], _ = orch_push(host, src, fresh("orch-exec"), cache, reconnect=True)
        shutil.rmtree(work / "host" / "orch-exec")

        started = time.monotonic()
        push.local_manifest(src, work / "cold-cache")
        hashing = time.monotonic() - started

        print(f"\n{'tool':<28} {'seconds':>8} {'MiB/s':>8} {'vs scp -r':>10}")
        for name, seconds in results.items():
            print(f"{name:<28} {seconds:>8.2f} {total / 2**20 / seconds:>8.0f} {results['scp -r'] / seconds:>9.2f}x")
        print(f"\norch push moved {first.sent_bytes / 2**30:.2f} GiB in {first.sent_files} files; manifest {first.manifest[:12]}")
        print(f"unchanged re-push: {repush:.3f} s, {again.sent_bytes} bytes moved")
        print(f"first-time local hashing of the checkpoint (cached afterwards by size+mtime): {hashing:.2f} s")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
