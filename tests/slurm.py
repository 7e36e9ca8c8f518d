"""A real one-node Slurm cluster on this machine for the Slurm tests, in a temp folder.

munged runs with a generated key; slurmctld and slurmd (Debian's slurm-wlm) run in the foreground
as children of the test session with a generated slurm.conf: process tracking by the process
tree (proctrack/linuxproc, task/none: no cgroups needed), cores and GPUs scheduled
(select/cons_tres: a job holding the node's 8 GPUs makes the next one that asks for them wait),
the GPUs plain files in the folder (nothing opens them: the rehearsal needs no devices), free
ports, and every state, spool, log and pid file in the folder. With `nodes=2` (or more) one slurmd
per node, all on this machine: each its own NodeName (`node1`...), slurmd port and spool folder,
and its own loopback address (NodeAddr 127.0.0.1, 127.0.0.2, ...), as a cluster's nodes are told
apart by the address Slurm reaches them at. Clients find the cluster through SLURM_CONF (set in `environ`). Where Slurm
cannot be had, `missing` says why and the tests skip.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol")
GPUS = 8


@dataclass
class Cluster:
    folder: Path
    node: str
    partition: str = "debug"
    nodes: list[str] = field(default_factory=list)  # every node's NodeName (the first is `node`)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    def environ(self) -> dict[str, str]:
        """What a Slurm client needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def client(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), env={**os.environ, **self.environ()}, capture_output=True, text=True,
                              timeout=timeout)

    def jobs(self) -> list[str]:
        """`id state reason name` of every job in the queue."""
        done = self.client("squeue", "-h", "-o", "%i %T %r %j")
        assert done.returncode == 0, done.stderr
        return [line for line in done.stdout.splitlines() if line.strip()]

    def block(self) -> str:
        """A job that holds the node until cancelled: the id."""
        done = self.client("sbatch", "--parsable", "--job-name=blocker", "--output=/dev/null", "--wrap=sleep 600")
        assert done.returncode == 0, done.stderr
        job = done.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(line.startswith(f"{job} RUNNING") for line in self.jobs()):
                return job
            time.sleep(0.2)
        raise AssertionError(f"the blocking job {job} never ran: {self.jobs()}")

    def cancel_all(self) -> None:
        self.client("scancel", "--full", *[line.split()[0] for line in self.jobs()])

    def stop(self) -> None:
        """Jobs cancelled (their step daemons exit), the daemons stopped, then anything left that
        carries this cluster's SLURM_CONF (a step daemon outlives slurmd by design) killed."""
        if self.procs and self.conf.exists() and all(p.poll() is None for p in self.procs):
            self.cancel_all()
            deadline = time.monotonic() + 5
            while self.jobs() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in _carrying(f"SLURM_CONF={self.conf}".encode()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


def _carrying(entry: bytes) -> list[int]:
    """Processes whose environment holds `entry` (read from /proc; this one aside)."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if entry in environ.read_bytes().split(b"\0") and int(environ.parent.name) != os.getpid():
                found.append(int(environ.parent.name))
        except (OSError, ValueError):
            continue
    return found


def missing() -> str | None:
    """Why the cluster cannot start here, or None."""
    if os.geteuid() != 0:
        return "the Slurm tests run slurmd as root (its job launch switches users); not root here"
    absent = [p for p in PROGRAMS if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): `make slurm-deps` installs slurm-wlm and munge"
    return None


def start(folder: Path, nodes: int = 1) -> Cluster:
    folder.mkdir(parents=True, mode=0o700)
    names = [socket.gethostname()] if nodes == 1 else [f"node{i}" for i in range(1, nodes + 1)]
    cluster = Cluster(folder, names[0], nodes=names)
    try:
        cluster.procs.append(_munged(folder))
        _write_conf(cluster, free_port(), [free_port() for _ in names])
        log = open(folder / "daemons.log", "ab")
        for daemon in (["slurmctld", "-D", "-i", "-f", str(cluster.conf)],
                       *(["slurmd", "-D", "-f", str(cluster.conf), "-N", name] for name in names)):
            cluster.procs.append(subprocess.Popen(daemon, stdout=log, stderr=log, env={**os.environ, **cluster.environ()}))
        _wait_idle(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _munged(folder: Path) -> subprocess.Popen:
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    proc = subprocess.Popen(["munged", "-F", "-f", f"--socket={folder / 'munge.socket'}", f"--key-file={key}",
                             f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
                             f"--seed-file={folder / 'munged.seed'}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not (folder / "munge.socket").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"munged did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
        time.sleep(0.05)
    return proc


def _write_conf(cluster: Cluster, ctld_port: int, slurmd_ports: list[int]) -> None:
    f = cluster.folder
    # slurmd counts a GPU per device file; plain files stand in (nothing opens them)
    (f / "gpus").mkdir()
    for index in range(GPUS):
        (f / "gpus" / f"gpu{index}").touch()
    (f / "gres.conf").write_text("".join(f"NodeName={node} Name=gpu File={f / 'gpus'}/gpu[0-{GPUS - 1}]\n"
                                         for node in cluster.nodes))
    several = len(cluster.nodes) > 1
    # several slurmd on one machine: each node its own port (`Port=`), spool and pid file (%n: its name)
    node_lines = [f"NodeName={node} NodeAddr=127.0.0.{i + 1} CPUs={os.cpu_count() or 1} Gres=gpu:{GPUS} State=UNKNOWN"
                  + (f" NodeHostname={socket.gethostname()} Port={port}" if several else "")
                  for i, (node, port) in enumerate(zip(cluster.nodes, slurmd_ports))]
    cluster.conf.write_text("\n".join([
        "ClusterName=orchtest",
        f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_ports[0]}",
        "SlurmUser=root",
        "AuthType=auth/munge",
        f"AuthInfo=socket={f / 'munge.socket'}",
        "CredType=cred/munge",
        f"StateSaveLocation={f / 'state'}",
        f"SlurmdSpoolDir={f / 'spool'}{'-%n' if several else ''}",
        f"SlurmctldPidFile={f / 'slurmctld.pid'}",
        f"SlurmdPidFile={f / 'slurmd'}{'-%n' if several else ''}.pid",
        f"SlurmctldLogFile={f / 'slurmctld.log'}",
        f"SlurmdLogFile={f / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=1",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "GresTypes=gpu",
        "MinJobAge=2",
        "KillWait=2",
        *node_lines,
        f"PartitionName={cluster.partition} Nodes={','.join(cluster.nodes)} Default=YES MaxTime=INFINITE State=UP",
        "",
    ]))
    for sub in ("state", *(f"spool-{node}" if several else "spool" for node in cluster.nodes)):
        (f / sub).mkdir()


def _wait_idle(cluster: Cluster, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    last = ""
    while time.monotonic() < deadline:
        for proc in cluster.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode}): {_logs(cluster)}")
        done = cluster.client("sinfo", "-h", "-N", "-o", "%T", timeout=10)
        last = done.stdout.strip() + done.stderr.strip()
        if done.returncode == 0 and set(last.split()) == {"idle"}:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the Slurm node never became idle (sinfo: {last!r}): {_logs(cluster)}")


def _logs(cluster: Cluster) -> str:
    text = ""
    for name in ("slurmctld.log", "slurmd.log", "daemons.log"):
        path = cluster.folder / name
        if path.exists():
            text += f"\n--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:])
    return text
