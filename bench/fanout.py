"""Fan-out benchmark: `orch hosts check` against parallel-ssh and Ansible on the same namespace fleet.

As root: builds N hosts (default 32), each a network namespace with its own sshd (tests/sshd.py),
then times, on the same hosts and in one run:
  orch hosts check --json                       (facts script, one round trip per host)
  parallel-ssh -p N -i FACTS                    (one OpenSSH client per host, the same facts script)
  parallel-ssh -p N -i hostname                 (one OpenSSH client per host)
  ansible all -m raw -a hostname -f N           (one OpenSSH client per host, no ControlPersist)
Wall time is the median of --repeat runs, the commands alternated; controller CPU is user+sys of the command and all its
children. Then 64 namespace hosts, and 64 connections to ONE stock sshd (MaxStartups 10:30:100),
checking that no connection is dropped.

    sudo .venv/bin/python bench/fanout.py [--hosts 32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import sshd  # noqa: E402
from orchestrator import engines  # noqa: E402
from orchestrator.core import shell  # noqa: E402
from orchestrator.remote import connect  # noqa: E402
from orchestrator.remote.group import fan_out  # noqa: E402

TOOLS = {"parallel-ssh": ("parallel-ssh", "pssh"), "ansible": ("ansible", "ansible-core")}


def ensure_tool(command: str, debian_package: str) -> str | None:
    """The tool's path, installing its Debian package as root when missing; None with a note if impossible."""
    if shutil.which(command):
        return shutil.which(command)
    if os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", debian_package], capture_output=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if not shutil.which(command):
        print(f"note: {command} is not installed and could not be (Debian package {debian_package}); skipped")
    return shutil.which(command)


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds, controller CPU seconds (the command and its children), and the result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


def measure(commands: dict[str, tuple[str, list[str], dict[str, str], Any]], repeat: int) -> dict[str, dict]:
    """Each command `repeat` times, alternated (one of each per round, so all see the same load on a
    shared machine); {key: median wall and CPU}. A command that fails once is dropped with a note."""
    walls: dict[str, list[float]] = {key: [] for key in commands}
    cpus: dict[str, list[float]] = {key: [] for key in commands}
    for _ in range(repeat):
        for key, (label, command, env, ok) in list(commands.items()):
            wall, cpu, done = timed(command, env)
            if not ok(done):
                print(f"{label}: FAILED (exit {done.returncode}): {(done.stderr or done.stdout)[-400:]}")
                del commands[key]
                continue
            walls[key].append(wall)
            cpus[key].append(cpu)
    results = {}
    for key, (label, *_) in commands.items():
        results[key] = {"wall": statistics.median(walls[key]), "cpu": statistics.median(cpus[key])}
        print(f"{label:14s} wall {results[key]['wall']:6.2f} s   controller CPU {results[key]['cpu']:6.2f} s   "
              f"(median of {repeat}, alternated)")
    return results


def write_inputs(fleet: sshd.Fleet, work: Path, host_python: str) -> dict[str, Path]:
    known = fleet.known_hosts()
    key = fleet.servers[0].client_key
    inventory = work / "inventory.yaml"
    inventory.write_text("hosts:\n" + "".join(s.inventory_entry(known, work / "w" / s.name) + f"    python: {host_python}\n"
                                             for s in fleet.servers))
    pssh_hosts = work / "pssh_hosts"
    pssh_hosts.write_text("".join(f"root@{s.address}\n" for s in fleet.servers))
    ansible_inventory = work / "ansible_hosts"
    ansible_inventory.write_text("[fleet]\n" + "".join(f"{s.address}\n" for s in fleet.servers) + (
        "[fleet:vars]\nansible_user=root\n"
        f"ansible_ssh_private_key_file={key}\n"
        f"ansible_ssh_common_args='-F /dev/null -o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes'\n"))
    return {"known": known, "key": key, "inventory": inventory, "pssh": pssh_hosts, "ansible": ansible_inventory}


def compare(fleet: sshd.Fleet, work: Path, repeat: int, host_python: str) -> None:
    n = len(fleet.servers)
    files = write_inputs(fleet, work, host_python)
    env = {**os.environ, "HOME": str(work), "ORCH_INVENTORY": str(files["inventory"]), "PYTHONPATH": str(ROOT)}
    env.pop("SSH_AUTH_SOCK", None)
    print(f"\n== {n} namespace hosts (their Python: {host_python}) ==")

    def orch_ok(done: subprocess.CompletedProcess) -> bool:
        return done.returncode == 0 and all(f["reachable"] for f in json.loads(done.stdout))

    commands: dict[str, tuple[str, list[str], dict[str, str], Any]] = {
        "orch": ("orch check", [sys.executable, "-m", "orchestrator.cli", "hosts", "check", "--json"], env, orch_ok),
        # the same command as the others, through orch's transport: the fan-out alone, facts script aside
        "orch-hostname": ("orch hostname", [sys.executable, __file__, "--hostname-only", str(files["inventory"])], env,
                          lambda d: d.returncode == 0 and len(d.stdout.split()) == n),
    }
    if ensure_tool(*TOOLS["parallel-ssh"]):
        ssh_options = f"-F /dev/null -i {files['key']} -o UserKnownHostsFile={files['known']} -o StrictHostKeyChecking=yes"
        pssh = ["parallel-ssh", "-h", str(files["pssh"]), "-p", str(n), "-t", "60", "-x", ssh_options, "-i"]
        commands["pssh-facts"] = ("pssh facts", [*pssh, facts_command(host_python)], env, lambda d: d.returncode == 0)
        commands["parallel-ssh"] = ("parallel-ssh", [*pssh, "hostname"], env, lambda d: d.returncode == 0)
    if ensure_tool(*TOOLS["ansible"]):
        ansible_env = {**env, "ANSIBLE_SSH_ARGS": "-o ControlMaster=no", "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
                       "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_NOCOLOR": "1"}
        commands["ansible"] = ("ansible raw", ["ansible", "all", "-i", str(files["ansible"]), "-m", "raw", "-a",
                                               "hostname", "-f", str(n)], ansible_env, lambda d: d.returncode == 0)
    results: dict[str, dict | None] = dict(measure(commands, repeat))
    ratios(results)


def facts_command(host_python: str) -> str:
    """The command `orch hosts check` sends each host (its workdir aside), as an exec channel runs it."""
    packages = tuple((engine.package, engine.version_files()) for engine in map(engines.get, engines.KNOWN))
    return shell.in_bash(shell.host_facts(host_python, "/tmp", 30000, None, packages))


def ratios(results: dict[str, dict | None]) -> None:
    pairs = {"orch": (("pssh-facts", "wall <= 0.9"), ("parallel-ssh", "wall <= 1.0"), ("ansible", "CPU <= 0.5")),
             "orch-hostname": (("parallel-ssh", "wall <= 0.9"), ("ansible", "CPU <= 0.5"))}
    for mine, others in pairs.items():
        ours = results.get(mine)
        if not ours:
            continue
        for other, target in others:
            theirs = results.get(other)
            if theirs:
                print(f"{mine:13s} / {other:12s}: wall {ours['wall'] / theirs['wall']:.2f}   "
                      f"controller CPU {ours['cpu'] / theirs['cpu']:.2f}   (target {target})")
            else:
                print(f"{mine} / {other}: not measured ({other} unavailable or failed)")


def hostname_only(inventory: Path) -> None:
    """`hostname` on every inventory host through orch's SSH fan-out; prints one name per host."""
    from orchestrator.core import inventory as inventories

    hosts = list(inventories.load(inventory).hosts.values())

    async def run(conn) -> str:
        return (await conn.run("hostname")).out.strip()

    results = asyncio.run(fan_out(hosts, run, opener=connect))
    print("\n".join(str(r) for r in results.values()))
    sys.exit(0 if all(isinstance(r, str) for r in results.values()) else 3)


async def no_drops_on_one_sshd(folder: Path, connections: int) -> None:
    """`connections` hosts that are all the same stock sshd: the bounded opens must keep every one."""
    from orchestrator.host import facts as hostfacts

    server = sshd.start(folder, "one")
    try:
        known = folder / "known_hosts"
        known.write_text(server.known_line())
        base = server.host(known, folder / "w")
        hosts = [dataclasses.replace(base, name=f"same{i:02d}") for i in range(connections)]
        started = time.perf_counter()
        facts = await hostfacts.check_all(hosts)
        dropped = [f.error for f in facts if not f.reachable]
        print(f"{connections} connections to one sshd (MaxStartups 10:30:100): {connections - len(dropped)} ok, "
              f"{len(dropped)} dropped, {time.perf_counter() - started:.2f} s" + (f"; first: {dropped[0]}" if dropped else ""))

        async def hold(conn) -> str:
            return (await conn.run("true")).command

        unbounded = await fan_out(hosts, hold, limit=connections, opener=connect)
        lost = sum(1 for r in unbounded.values() if not isinstance(r, str))
        print(f"  for contrast, {connections} opens at once (no bound, handshake retries only): {lost} failed")
    finally:
        server.stop()


def default_host_python() -> str:
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big", type=int, default=64, help="hosts in the no-dropped-connection run")
    parser.add_argument("--host-python", default=default_host_python(),
                        help="the Python the inventory names for each host, as a real inventory does (default: "
                             "the system's /usr/bin/python3; a bare `python3` may be a slow version-manager shim)")
    parser.add_argument("--hostname-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hostname_only:
        return hostname_only(args.hostname_only)
    reason = sshd.netns_missing()
    if reason:
        sys.exit(f"cannot build the namespace fleet: {reason}")
    work = Path(tempfile.mkdtemp(prefix="orch-fanout-"))
    os.environ["HOME"] = str(work)  # nothing reads or writes the user's ~/.ssh
    os.environ.pop("SSH_AUTH_SOCK", None)
    fleet = sshd.Fleet(work / "fleet", args.hosts)
    try:
        (work / "fleet").mkdir()
        fleet.start()
        compare(fleet, work, args.repeat, args.host_python)
    finally:
        fleet.stop()
    big = sshd.Fleet(work / "big", args.big)
    try:
        (work / "big").mkdir()
        big.start()
        files = write_inputs(big, work, args.host_python)
        env = {**os.environ, "ORCH_INVENTORY": str(files["inventory"]), "PYTHONPATH": str(ROOT)}
        wall, cpu, done = timed([sys.executable, "-m", "orchestrator.cli", "hosts", "check", "--json"], env)
        facts = json.loads(done.stdout or "[]")
        down = [f["host"] for f in facts if not f["reachable"]]
        print(f"\n== {args.big} namespace hosts: {len(facts) - len(down)} reachable, {len(down)} dropped, "
              f"wall {wall:.2f} s, controller CPU {cpu:.2f} s ==")
    finally:
        big.stop()
    asyncio.run(no_drops_on_one_sshd(work / "one", args.big))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
