"""Inventory files -> hosts; selection by name or tag."""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import names, render, yamlfile
from orchestrator import rehearsal as stand_ins
from orchestrator.engines import registry as engines
from orchestrator.errors import SpecError
from .spec import ENV_NAME

TRANSPORTS = ("local", "ssh", "slurm")
HOST_KEY_POLICIES = ("strict", "accept-new")
HOST_KEYS = {
    "transport", "address", "port", "user", "identity", "proxy_jump", "ssh_config", "host_key_policy",
    "known_hosts", "workdir", "python", "gpus", "env", "tags", "rehearsal", "vars", "secrets",
}
# a `transport: slurm` entry: the login node (`local`, or an address reached over SSH with the
# entry's ssh keys) and the allocation orch asks for; no `address:` or `gpus:` of its own
SLURM_KEYS = (HOST_KEYS - {"address", "gpus"}) | {"login", "partition", "gpus_per_node", "time", "account", "options"}
SLURM_NAME = re.compile(r"[A-Za-z0-9_.+-]+")  # a partition or account name
SLURM_TIME = re.compile(r"\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d+(:\d{2}){0,2}")  # minutes, M:S, H:M:S, D-H[:M[:S]]
SLURM_OPTION = re.compile(r"--[a-z][a-z0-9-]*(=\S+)?")
# what orch itself sets on the job: an option for them would contradict the entry's keys
SLURM_OWN = {"job-name": "the job's name marks it as orch's", "comment": "it names orch's controller", "partition": "use `partition:`", "time": "use `time:`",
             "account": "use `account:`", "nodes": "a run asks for its nodes", "output": "orch discards the job's output",
             "wrap": "orch gives the job its placeholder command", "parsable": "orch reads the job id with it",
             "gpus-per-node": "use `gpus_per_node:`", "gres": "use `gpus_per_node:`", "gpus": "use `gpus_per_node:`"}


@dataclass(frozen=True)
class Allocation:
    """What a `transport: slurm` entry asks Slurm for, and through which login node."""

    login: str  # "local" (this machine is the login node) or the login node's address, reached over SSH
    partition: str | None = None
    gpus_per_node: int = 0
    time: str | None = None  # Slurm's time format
    account: str | None = None
    options: tuple[str, ...] = ()  # more sbatch options, each one `--name` or `--name=value`
    nodes: int = 1  # the job's nodes: a sweep asks for as many as its widest plan on the entry (`nodes: N`)

    def describe(self) -> str:
        login = "this machine" if self.login == "local" else self.login
        return f"login node {login}, partition {self.partition or 'default'}"


@dataclass(frozen=True)
class Host:
    name: str
    transport: str = "ssh"
    address: str | None = None
    port: int | None = None
    user: str | None = None
    identity: str | None = None
    proxy_jump: str | None = None
    ssh_config: str | None = None
    host_key_policy: str = "strict"
    known_hosts: str | None = None
    workdir: str = "~/.orch"
    python: str = "python3"
    gpus: int = 0
    env: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    rehearsal: str | None = None  # on a rehearsal host, the emulated release (see `_rehearsal_release`)
    vars: dict[str, Any] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()  # env names whose values are secret although their names do not say so
    slurm: Allocation | None = None  # set for `transport: slurm`

    def login_host(self) -> Host:
        """A slurm entry's login node as a host of its own (its ssh keys are the entry's)."""
        assert self.slurm is not None
        if self.slurm.login == "local":
            return dataclasses.replace(self, transport="local", address=None, slurm=None)
        return dataclasses.replace(self, transport="ssh", address=self.slurm.login, slurm=None)

    @property
    def rehearsal_dir(self) -> str | None:
        """Where the rehearsal stand-ins live on this host (first on PYTHONPATH at launch)."""
        return f"{self.workdir.rstrip('/')}/rehearsal" if self.rehearsal else None

    def context(self) -> dict[str, Any]:
        """What templates see as `host`."""
        context = {
            "name": self.name, "address": self.address or self.name, "workdir": self.workdir,
            "python": self.python, "gpus": self.gpus, "env": dict(self.env), "tags": list(self.tags),
            "vars": dict(self.vars),
        }
        if self.rehearsal:  # left undefined elsewhere, so a template that needs it fails loudly
            context["rehearsal"] = self.rehearsal_dir
        return context


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: dict[str, Host]
    template_folders: tuple[Path, ...] = ()  # `template_folders:` more folders a template may come from

    def select(self, names: tuple[str, ...] | list[str]) -> list[Host]:
        """Hosts by name or tag, in inventory order; an unknown name is an error naming the known ones."""
        wanted = [n for n in names if n]
        if not wanted:
            raise SpecError(
                f"no hosts chosen: set `hosts:` in the experiment or pass --hosts; "
                f"hosts in {self.path}: {', '.join(self.hosts) or 'none'}"
            )
        chosen: list[Host] = []
        for name in wanted:
            matches = [h for h in self.hosts.values() if h.name == name or name in h.tags]
            if not matches:
                raise SpecError(
                    f"no host or tag '{name}' in {self.path}; hosts: {', '.join(self.hosts) or 'none'}"
                )
            chosen.extend(h for h in matches if h not in chosen)
        return chosen


def load(path: Path) -> Inventory:
    data = yamlfile.load(path)
    yamlfile.check_keys(data, {"hosts", render.FOLDERS_KEY}, "the inventory")
    folders = render.named_folders(data.get(render.FOLDERS_KEY), path.parent, data.where(render.FOLDERS_KEY))
    hosts_data = yamlfile.require_mapping(data.get("hosts") or {}, data.where("hosts"), "`hosts`")
    hosts = {}
    for name, body in hosts_data.items():
        names.identifier(name, hosts_data.where(name), "host name", "rename the host")
        body = body if body is not None else yamlfile.Located(source=str(path), line=hosts_data.line_of(name))
        hosts[name] = _host(name, yamlfile.require_mapping(body, hosts_data.where(name), f"host '{name}'"))
    return Inventory(path, hosts, folders)


def _host(name: str, body: yamlfile.Located) -> Host:
    transport = body.get("transport", "ssh")
    yamlfile.check_keys(body, SLURM_KEYS if transport == "slurm" else HOST_KEYS, f"host '{name}'")
    if transport not in TRANSPORTS:
        raise SpecError(f"{body.where('transport')}: host '{name}' transport {transport!r} is not one of "
                        f"{', '.join(TRANSPORTS)}; {yamlfile.did_you_mean(str(transport), TRANSPORTS)}")
    policy = body.get("host_key_policy", "strict")
    if policy not in HOST_KEY_POLICIES:
        raise SpecError(
            f"{body.where('host_key_policy')}: host '{name}' host_key_policy must be one of {', '.join(HOST_KEY_POLICIES)}"
        )
    gpus = body.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise SpecError(f"{body.where('gpus')}: host '{name}' gpus must be a whole number >= 0")
    port = body.get("port")
    if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
        raise SpecError(f"{body.where('port')}: host '{name}' port must be 1-65535")
    env = yamlfile.require_mapping(body.get("env") or {}, body.where("env"), f"host '{name}' env")
    for key, value in env.items():
        if not ENV_NAME.match(str(key)):
            raise SpecError(f"{env.where(key)}: {key!r} is not a valid environment variable name")
        if isinstance(value, (dict, list)) or value is None:
            raise SpecError(f"{env.where(key)}: host '{name}' env value of {key} must be a string or number")
    tags = body.get("tags") or []
    if not isinstance(tags, list):
        raise SpecError(f"{body.where('tags')}: host '{name}' tags must be a list, e.g. [h100]")
    for tag in tags:
        names.identifier(tag, body.where("tags"), f"host '{name}' tag", "tags are names, e.g. [h100, big]")
    variables = body.get("vars") or {}
    yamlfile.require_mapping(variables, body.where("vars"), f"host '{name}' vars")
    allocation = _allocation(name, body) if transport == "slurm" else None
    if allocation is not None:
        gpus = allocation.gpus_per_node
    login_local = allocation is not None and allocation.login == "local"
    default_python = sys.executable if transport == "local" or login_local else "python3"
    rehearsal = _rehearsal_release(name, body)

    def text(key: str) -> str | None:
        value = body.get(key)
        if isinstance(value, (dict, list, bool)):
            kind = "a mapping" if isinstance(value, dict) else "a list" if isinstance(value, list) else repr(value)
            raise SpecError(f"{body.where(key)}: host '{name}' `{key}` must be text, got {kind}")
        return None if value is None else str(value)

    return Host(
        name=name,
        transport=transport,
        address=text("address"),
        port=port,
        user=text("user"),
        identity=text("identity"),
        proxy_jump=text("proxy_jump"),
        ssh_config=text("ssh_config"),
        host_key_policy=policy,
        known_hosts=text("known_hosts"),
        workdir=text("workdir") or "~/.orch",
        python=text("python") or default_python,
        gpus=gpus,
        env={str(k): str(v) for k, v in env.items()},
        tags=tuple(str(t) for t in tags),
        rehearsal=rehearsal,
        vars=dict(variables),
        secrets=_secret_names(name, body),
        slurm=allocation,
    )


def _allocation(name: str, body: yamlfile.Located) -> Allocation:
    """A slurm entry's allocation keys, each checked as data: nothing of them reaches a shell
    unquoted (`core/shell/` quotes every option as one word)."""
    what = f"host '{name}'"
    login = body.get("login")
    if not isinstance(login, str) or not login or any(c.isspace() for c in login):
        raise SpecError(f"{body.where('login')}: {what} (transport: slurm) needs `login:`: `local` when this machine "
                        "is the login node, else the login node's address (reached over SSH with the entry's ssh keys)")
    if not isinstance(body.get("workdir"), str):
        raise SpecError(f"{body.where('workdir')}: {what} (transport: slurm) needs `workdir:` on the cluster's shared "
                        "filesystem (the nodes' lock, journal and run folders live there), e.g. /shared/$USER/orch")
    gpus = body.get("gpus_per_node", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise SpecError(f"{body.where('gpus_per_node')}: {what} gpus_per_node must be a whole number >= 0")
    names = {}
    for key in ("partition", "account"):
        value = body.get(key)
        if value is not None and not (isinstance(value, str) and SLURM_NAME.fullmatch(value)):
            raise SpecError(f"{body.where(key)}: {what} `{key}` must be a Slurm name (letters, digits, _ . + -), "
                            f"got {value!r}")
        names[key] = value
    time = body.get("time")
    if time is not None and not SLURM_TIME.fullmatch(str(time)):
        raise SpecError(f"{body.where('time')}: {what} `time` {time!r} is not a Slurm time limit: minutes, M:SS, "
                        "H:MM:SS or D-H:MM:SS, e.g. \"2:00:00\" (quote it: YAML reads 1:30 as a number)")
    return Allocation(login, names["partition"], gpus, None if time is None else str(time), names["account"],
                      _slurm_options(what, body))


def _slurm_options(what: str, body: yamlfile.Located) -> tuple[str, ...]:
    options = body.get("options") or []
    if not isinstance(options, list):
        raise SpecError(f"{body.where('options')}: {what} `options` must be a list of sbatch options, "
                        "e.g. [--qos=high, --constraint=h100]")
    for option in options:
        if not isinstance(option, str) or not SLURM_OPTION.fullmatch(option):
            raise SpecError(f"{body.where('options')}: {what} option {option!r} is not one sbatch option: write "
                            "`--name` or `--name=value` as one item, no spaces (e.g. --qos=high, not \"--qos high\")")
        own = option[2:].split("=", 1)[0]
        if own in SLURM_OWN:
            raise SpecError(f"{body.where('options')}: {what} option {option} is orch's to set ({SLURM_OWN[own]})")
    return tuple(options)


def _secret_names(name: str, body: yamlfile.Located) -> tuple[str, ...]:
    value = body.get("secrets") or []
    if not isinstance(value, list) or not all(isinstance(v, str) and ENV_NAME.fullmatch(v) for v in value):
        raise SpecError(f"{body.where('secrets')}: host '{name}' secrets must be a list of environment variable "
                        "names, e.g. [WANDB_API, MY_ENDPOINT_PASS]")
    return tuple(value)


def _rehearsal_release(name: str, body: yamlfile.Located) -> str | None:
    """`rehearsal: true` is the default engine's default release; `rehearsal: "0.5.23"` names a
    release of one engine's stand-in (the others keep their default); false or absent: none."""
    value = body.get("rehearsal", False)
    if value is False or value is None:
        return None
    releases = stand_ins.releases()
    default = releases[engines.DEFAULT][1]
    if value is True:
        return default
    known = [release for names, _ in releases.values() for release in names]
    if str(value) not in known:
        raise SpecError(
            f"{body.where('rehearsal')}: host '{name}' rehearsal must be true, false or an emulated engine "
            f"release: {', '.join(known)} (true means {default})"
        )
    return str(value)
