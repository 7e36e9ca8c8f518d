"""Checkpoint push benchmark: orch's push against `scp -r -c aes128-gcm@openssh.com` and `rsync -a`
over ssh, measured side by side in one run, alternated, medians.

Generates a checkpoint folder (default 4 x 512 MiB random shards) in a temp dir and starts a real
sshd (tests/sshd.py): on 127.0.0.1, or with `--bridge` (root) in a network namespace joined to
this one by a veth pair on a bridge, every link at MTU 1500, as a host on a LAN is. Each round
times, in an order that rotates from round to round, each into a fresh destination folder:
  scp -r -c aes128-gcm@openssh.com
  rsync -a -e ssh                    (OpenSSH's default cipher)
  orch push                          (connection opened and closed inside the timing, as scp's)
  orch push, SFTP only               (with --sftp: the asyncssh path that OpenSSH's bulk route bypasses)
then an unchanged re-push by orch and by rsync (into the folder each just filled). Every figure is
the median of --rounds; ratios are speeds against scp and rsync (above 1: orch is faster). Everything
it made is deleted afterwards.

    .venv/bin/python bench/push.py [--shards 4] [--shard-mib 512] [--rounds 5] [--bridge] [--sftp]
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import sshd  # noqa: E402
from orchestrator.host import push  # noqa: E402
from orchestrator.remote import connect, openssh  # noqa: E402

MTU = 1500
SCP = "scp -c aes128-gcm"


def make_checkpoint(folder: Path, shards: int, mib: int) -> int:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for i in range(shards):
        with open(folder / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "wb") as out:
            for _ in range(max(1, mib // 64)):
                out.write(rng.integers(0, 2**63, min(mib, 64) * 2**20 // 8, dtype=np.int64).tobytes())
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


def orch_push(host, src: Path, dest: Path, cache: Path) -> tuple[float, push.PushResult]:
    async def go():
        started = time.monotonic()
        conn = await connect(host)
        try:
            result = await push.push(conn, src, str(dest), cache=cache)
        finally:
            await conn.close()
        return time.monotonic() - started, result
    return asyncio.run(go())


def sftp_only(run: Callable[[], tuple[float, push.PushResult]]) -> tuple[float, push.PushResult]:
    """`run` with OpenSSH's bulk route off: every byte through asyncssh's SFTP client."""
    threshold, openssh.BULK_MIN = openssh.BULK_MIN, 2**62
    try:
        return run()
    finally:
        openssh.BULK_MIN = threshold


def bridged(folder: Path) -> tuple[sshd.Fleet, sshd.Sshd]:
    """One sshd in a network namespace behind a veth pair on a bridge, every link at MTU 1500."""
    reason = sshd.netns_missing()
    if reason:
        sys.exit(f"--bridge: cannot build the namespace host: {reason}")
    folder.mkdir()
    fleet = sshd.Fleet(folder, 1)
    try:
        fleet.start()
        for device, netns in ((fleet.bridge, None), (fleet.veth(0), None), (f"v{fleet.tag}n0", fleet.namespaces[0])):
            command = ["ip", "link", "set", "dev", device, "mtu", str(MTU)]
            subprocess.run(command if netns is None else ["ip", "netns", "exec", netns, *command], check=True)
    except BaseException:
        fleet.stop()
        raise
    return fleet, fleet.servers[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bridge", action="store_true", help="sshd in a network namespace over a MTU-1500 bridge (root)")
    parser.add_argument("--sftp", action="store_true", help="also time orch's asyncssh SFTP path alone")
    args = parser.parse_args()
    for tool in ("scp", "rsync"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (apt-get install openssh-client rsync)")
    work = Path(tempfile.mkdtemp(prefix="orch-bench-push-"))
    os.environ["HOME"] = str(work / "home")  # never the user's ~/.ssh
    os.environ.pop("SSH_AUTH_SOCK", None)
    (work / "home").mkdir()
    fleet, server = None, None
    try:
        src = work / "checkpoint"
        total = make_checkpoint(src, args.shards, args.shard_mib)
        if args.bridge:
            fleet, server = bridged(work / "fleet")
        else:
            server = sshd.start(work / "sshd", "bench")
        where_text = f"namespace host {server.address} over a bridge, MTU {MTU}" if args.bridge else "sshd on 127.0.0.1"
        print(f"checkpoint: {args.shards} x {args.shard_mib} MiB + config.json = {total / 2**30:.2f} GiB; {where_text}")
        known = work / "known_hosts"
        known.write_text(server.known_line())
        host = server.host(known, work / "host")
        login = f"{getpass.getuser()}@{server.address}"
        ssh = ["-P", str(server.port), *ssh_options(server, known)]
        rsh = " ".join(["ssh", "-p", str(server.port), *ssh_options(server, known)])
        cache = work / "cache"
        push.local_manifest(src, cache)  # hashing is paid once per checkpoint version, not per push: timed apart

        def fresh(name: str) -> Path:
            dest = work / "host" / name
            shutil.rmtree(dest, ignore_errors=True)
            dest.parent.mkdir(parents=True, exist_ok=True)
            return dest

        def scp() -> float:
            return timed(["scp", "-q", "-r", "-c", "aes128-gcm@openssh.com", *ssh, str(src), f"{login}:{fresh('scp')}"])

        def rsync() -> float:
            return timed(["rsync", "-a", "-e", rsh, f"{src}/", f"{login}:{fresh('rsync')}/"])

        def rsync_again() -> float:
            return timed(["rsync", "-a", "-e", rsh, f"{src}/", f"{login}:{work / 'host' / 'rsync'}/"])

        last: dict[str, push.PushResult] = {}

        def orch(name: str = "orch", only_sftp: bool = False) -> Callable[[], float]:
            def go() -> float:
                run = lambda: orch_push(host, src, fresh(name), cache)  # noqa: E731
                seconds, last[name] = sftp_only(run) if only_sftp else run()
                return seconds
            return go

        def orch_again() -> float:
            seconds, last["again"] = orch_push(host, src, work / "host" / "orch", cache)
            return seconds

        tools: dict[str, Callable[[], float]] = {SCP: scp, "rsync -a": rsync, "orch push": orch()}
        if args.sftp:
            tools["orch push (sftp only)"] = orch("orch-sftp", only_sftp=True)
        again_tools: dict[str, Callable[[], float]] = {"orch re-push": orch_again, "rsync re-push": rsync_again}
        times: dict[str, list[float]] = {name: [] for name in [*tools, *again_tools]}
        for round_no in range(args.rounds):
            names = list(tools)
            names = names[round_no % len(names):] + names[:round_no % len(names)]
            for name in names:
                times[name].append(tools[name]())
            for name in (list(again_tools) if round_no % 2 == 0 else list(again_tools)[::-1]):
                times[name].append(again_tools[name]())
            print(f"round {round_no + 1}: " + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in times.items()),
                  flush=True)
        report(times, total, last, args.rounds)
    finally:
        if fleet is not None:
            fleet.stop()
        elif server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(times: dict[str, list[float]], total: int, last: dict[str, push.PushResult], rounds: int) -> None:
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"\n{'medians of ' + str(rounds) + ' rounds':<24} {'seconds':>8} {'MiB/s':>8} {'vs ' + SCP:>18} {'vs rsync -a':>12}")
    for name in times:
        if name.endswith("re-push"):
            continue
        seconds = median[name]
        print(f"{name:<24} {seconds:>8.2f} {total / 2**20 / seconds:>8.0f} {median[SCP] / seconds:>17.2f}x "
              f"{median['rsync -a'] / seconds:>11.2f}x")
    print(f"{'orch re-push':<24} {median['orch re-push']:>8.3f} {'':>8} {'':>18} "
          f"{median['rsync re-push'] / median['orch re-push']:>11.2f}x   (rsync re-push {median['rsync re-push']:.3f} s)")
    first, again = last["orch"], last["again"]
    print(f"\norch push moved {first.sent_bytes / 2**30:.2f} GiB in {first.sent_files} files; manifest {first.manifest[:12]}; "
          f"unchanged re-push moved {again.sent_bytes} bytes")


if __name__ == "__main__":
    main()
