"""Inventory files -> hosts; selection by name or tag."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import names, yamlfile
from orchestrator import engines
from orchestrator.errors import SpecError
from .spec import ENV_NAME

TRANSPORTS = ("local", "ssh")
HOST_KEY_POLICIES = ("strict", "accept-new")
HOST_KEYS = {
    "transport", "address", "port", "user", "identity", "proxy_jump", "ssh_config", "host_key_policy",
    "known_hosts", "workdir", "python", "gpus", "env", "tags", "rehearsal", "vars", "secrets",
}


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
    yamlfile.check_keys(data, {"hosts"}, "the inventory")
    hosts_data = yamlfile.require_mapping(data.get("hosts") or {}, data.where("hosts"), "`hosts`")
    hosts = {}
    for name, body in hosts_data.items():
        names.identifier(name, hosts_data.where(name), "host name", "rename the host")
        body = body if body is not None else yamlfile.Located(source=str(path), line=hosts_data.line_of(name))
        hosts[name] = _host(name, yamlfile.require_mapping(body, hosts_data.where(name), f"host '{name}'"))
    return Inventory(path, hosts)


def _host(name: str, body: yamlfile.Located) -> Host:
    yamlfile.check_keys(body, HOST_KEYS, f"host '{name}'")
    transport = body.get("transport", "ssh")
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
    default_python = sys.executable if transport == "local" else "python3"
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
    )


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
    releases = engines.rehearsal_releases()
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
