"""The `orch` command: thin typer commands that load inputs, call the work, and print."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Optional

import typer

# Only light modules at the top: each command imports the heavy ones (the database layer, the run
# lifecycle, SSH) it needs, so `orch hosts check` or `orch --help` start in a fraction of the time.
from . import diff as diffs, inventory as inventories, spec as specs, ui
from .errors import EXIT_BAD_INPUT, EXIT_HOST, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, OrchError, SpecError

if TYPE_CHECKING:
    from .session import HostSession
    from .store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Run LLM-serving experiments on GPU hosts and keep an exact record of every run.")
hosts_app = typer.Typer(help="The hosts of the inventory.", invoke_without_command=True)
app.add_typer(hosts_app, name="hosts")


class Settings:
    db: str = "sqlite:///orch.db"
    inventory: Path = Path("inventory.yaml")


settings = Settings()


@app.callback()
def main_options(
    db: Optional[str] = typer.Option(None, "--db", help="Database URL (default: $ORCH_DB or sqlite:///orch.db)."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help="Inventory file (default: $ORCH_INVENTORY or ./inventory.yaml)."),
) -> None:
    settings.db = db or os.environ.get("ORCH_DB") or "sqlite:///orch.db"
    settings.inventory = inventory or Path(os.environ.get("ORCH_INVENTORY") or "inventory.yaml")


def _store() -> Store:
    from .store import Store

    return Store(settings.db)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, default=str)


def _split(values: Optional[str]) -> tuple[str, ...]:
    return tuple(v.strip() for v in (values or "").split(",") if v.strip())


def _load(spec_path: Path, hosts: Optional[str], overrides: list[str], variants: list[str]):
    spec = specs.load(spec_path)
    plans = specs.expand(spec, overrides, tuple(variants))
    inv = inventories.load(settings.inventory)
    chosen = inv.select(_split(hosts) or spec.hosts)
    return spec, plans, chosen


@app.command()
def run(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Experiment file."),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: the experiment's)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a param: key=value, or env.NAME=value."),
    variants: list[str] = typer.Option([], "--variant", help="Run only these variants (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Render and check everything; change nothing."),
    resume: bool = typer.Option(False, "--resume", help="Skip plans that already have a succeeded run."),
    no_preflight: bool = typer.Option(False, "--no-preflight", help="Skip the checkpoint checks (recorded with each run)."),
) -> None:
    """Run an experiment: every variant x matrix x repeat, patches reverted after each run."""
    from . import execute

    spec, plans, chosen = _load(spec_path, hosts, overrides, variants)
    if no_preflight:
        spec = dataclasses.replace(spec, preflight=False)
    store = _store()
    if resume:
        plans = _unfinished(store, plans)
        if not plans:
            ui.console.print("every plan already has a succeeded run; nothing to do")
            raise typer.Exit(EXIT_OK)
    outcomes = asyncio.run(execute.run_all(spec, plans, chosen, store, ui.progress, dry_run=dry_run))
    if not dry_run:
        ui.summary(outcomes)
    raise typer.Exit(max((o.exit_code for o in outcomes), default=EXIT_OK, key=_severity))


def _severity(code: int) -> int:
    """Exit codes by how bad they are: interrupted > host > bad input > failed > ok."""
    return {EXIT_OK: 0, EXIT_RUN_FAILED: 1, EXIT_BAD_INPUT: 2, EXIT_HOST: 3, EXIT_INTERRUPTED: 4}.get(code, 1)


def _unfinished(store: Store, plans: list[specs.RunPlan]) -> list[specs.RunPlan]:
    """The plans without a succeeded run of the same variant and params yet (for --resume)."""
    from .store import SUCCEEDED

    done: dict[tuple[str, str], int] = {}
    for r in store.runs(status=SUCCEEDED):
        key = (r.variant, json.dumps(r.params, sort_keys=True, default=str))
        done[key] = done.get(key, 0) + 1
    left = []
    for plan in plans:
        key = (plan.variant, json.dumps(plan.params, sort_keys=True, default=str))
        if done.get(key, 0) > 0:
            done[key] -= 1
        else:
            left.append(plan)
    return left


@app.command()
def render(
    spec_path: Path = typer.Argument(..., metavar="SPEC"),
    hosts: Optional[str] = typer.Option(None, "--hosts"),
    overrides: list[str] = typer.Option([], "--set"),
    variants: list[str] = typer.Option([], "--variant"),
) -> None:
    """Print the launch script each run would use, without touching any host."""
    from . import execute
    from .session import absolute

    spec, plans, chosen = _load(spec_path, hosts, overrides, variants)
    for plan in plans:
        host = chosen[0]
        if host.transport == "local":  # a remote home is only known once connected
            host = dataclasses.replace(host, workdir=absolute(host.workdir, str(Path.home())))
        context = execute.run_context(spec, plan, host, "<run>")
        from . import render as renderer
        from .secrets import redact

        ui.console.print(f"[bold]# {plan.variant} on {host.name}[/]")
        ui.raw(redact(renderer.render_file(spec.template, context), context["env"]))


@app.command("ls")
def list_runs(
    experiment: Optional[str] = typer.Option(None, "--experiment", "-e"),
    status: Optional[str] = typer.Option(None, "--status"),
    limit: int = typer.Option(50, "--limit", "-n"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List runs, oldest first (the newest `--limit`)."""
    rows = _store().runs(experiment, status, limit)
    if as_json:
        ui.raw(dumps([{"id": r.id, "uid": r.uid, "experiment": r.experiment, "variant": r.variant, "host": r.host,
                       "status": r.status, "flags": r.flags, "started_at": r.started_at, "ended_at": r.ended_at}
                      for r in rows]) + "\n")
    else:
        ui.runs(rows)


@app.command()
def show(run_ref: str = typer.Argument(..., metavar="RUN"), as_json: bool = typer.Option(False, "--json")) -> None:
    """Everything recorded about one run (id, uid prefix, `last` or `last~N`)."""
    store = _store()
    record = store.record(store.get(run_ref))
    if as_json:
        ui.raw(dumps(record) + "\n")
    else:
        ui.show(record)


@app.command()
def diff(
    run_a: str = typer.Argument("last~1", metavar="RUN_A"),
    run_b: str = typer.Argument("last", metavar="RUN_B"),
    everything: bool = typer.Option(False, "--all", help="Also show params and debug fields that are equal."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Compare two runs: params, env, metrics with deltas, patches, debug fields, launch script."""
    store = _store()
    a, b = store.record(store.get(run_a)), store.record(store.get(run_b))
    rows = diffs.compare(a, b, everything=everything)
    if as_json:
        ui.raw(dumps(diffs.as_json(a, b, rows)) + "\n")
    else:
        ui.diff(a, b, rows, diffs.command_diff(a, b))


SERIES_KINDS = ("decode", "prefill")


@app.command()
def series(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    kind: str = typer.Option("decode", "--kind", help="decode or prefill: which log lines' series."),
    as_csv: bool = typer.Option(False, "--csv", help="Comma-separated values, for a spreadsheet or a plot."),
) -> None:
    """A run's time series from its server log: one row per decode (or prefill) log line."""
    if kind not in SERIES_KINDS:
        raise SpecError(f"--kind {kind!r}: expected one of {', '.join(SERIES_KINDS)}")
    store = _store()
    run_row = store.get(run_ref)
    rows = [row for row in store.record(run_row)["series"] if row["kind"] == kind]
    if not rows:
        ui.note(f"run {run_row.id} has no {kind} series: its log holds no {kind.capitalize()} batch lines")
    elif as_csv:
        ui.raw(ui.series_csv(rows))
    else:
        ui.series(rows, f"run {run_row.id} {kind} series ({len(rows)} log lines)")


@app.command()
def logs(
    run_ref: str = typer.Argument(..., metavar="RUN"),
    follow: bool = typer.Option(False, "--follow", "-f", help="Follow the live log of a running run."),
    debug: bool = typer.Option(False, "--debug", help="Only the debug lines."),
) -> None:
    """Print a run's server log (stored at the end of the run, or live from the host)."""
    from .store import RUNNING

    store = _store()
    run_row = store.get(run_ref)
    if debug:
        for line in store.record(run_row)["debug_lines"]:
            ui.raw(line["text"] + "\n")
        return
    if follow and run_row.status == RUNNING:
        asyncio.run(_follow(run_row))
        return
    data = store.log(run_row)
    if data is None:
        raise SpecError(f"run {run_row.id} has no stored log yet; `orch logs {run_row.id} --follow` reads it live")
    ui.raw(data.decode(errors="replace"))


async def _follow(run_row: Any) -> None:
    from . import server
    from .session import HostSession

    inv = inventories.load(settings.inventory)
    host = inv.select([run_row.host])[0]
    session = await HostSession.open(host)
    srv = server.Server(f"{session.host.workdir}/runs/{run_row.uid}", 0, 0)
    offset = 0
    try:
        while True:
            status = await server.poll(session.conn, srv, offset)
            offset += len(status.new_bytes)
            ui.raw(status.new_bytes.decode(errors="replace"))
            if status.exit_code is not None or not status.alive:
                break
            await asyncio.sleep(0.5)
    finally:
        await session.conn.close()


@app.command()
def revert(
    host: Optional[str] = typer.Option(None, "--host", help="Host or tag (default: every host in the inventory)."),
    force: bool = typer.Option(False, "--force", help="Also restore files that changed after orch patched them."),
) -> None:
    """Revert every patch orch left applied on a host (after a crash, or a drifted file)."""
    from .lock import HostLock
    from .recovery import recover

    inv = inventories.load(settings.inventory)
    chosen = inv.select(_split(host) or list(inv.hosts))
    store = _store()

    async def one(session: HostSession) -> list[Any]:
        lock = HostLock(session.conn, session.host.workdir, "revert")  # never under a live run
        broken = await lock.acquire()
        try:
            if force:
                await _show_drift(session)
            recovery = await recover(session, store, ui.progress, force=force, broken=broken)
        finally:
            await lock.release()
        for uid in recovery.interrupted:
            ui.progress(session.host.name, f"run {uid} marked interrupted: its controller died")
        return list(recovery.reverted)

    code = EXIT_OK
    for h, result in _each_host(chosen, one):
        if isinstance(result, OrchError):
            ui.error(str(result))
            code = max(code, result.exit_code)
        elif not result:
            ui.progress(h.name, "nothing to revert")
        else:
            for r in result:
                ui.progress(h.name, f"{r.state}: {r.file} ({r.name}, run {r.run})")
                if r.state == "drifted":
                    code = max(code, EXIT_RUN_FAILED)
                    ui.progress(h.name, f"  changed since it was patched; original kept at {r.backup}; "
                                        f"`orch revert --host {h.name} --force` restores it")
    raise typer.Exit(code)


def _each_host(hosts: list[inventories.Host], work: Callable[[HostSession], Awaitable[Any]]) -> list[tuple[Any, Any]]:
    """`work(session)` on every host at once: [(host, its result or its OrchError)]; a bug raises."""
    from .session import HostSession

    async def one(h: inventories.Host) -> Any:
        session = await HostSession.open(h)
        try:
            return await work(session)
        finally:
            await session.conn.close()

    async def everyone() -> list[Any]:
        return await asyncio.gather(*(one(h) for h in hosts), return_exceptions=True)

    results = asyncio.run(everyone())
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, OrchError):
            raise result
    return list(zip(hosts, results))


async def _show_drift(session: HostSession) -> None:
    from . import patching

    for record in await session.journal.records():
        if record.state != "drifted":
            continue
        try:
            current = (await session.conn.read_file(record.file)).decode(errors="replace")
        except FileNotFoundError:
            current = ""
        original = (await session.conn.read_file(record.backup)).decode(errors="replace")
        ui.progress(session.host.name, f"restoring {record.file}; the change being undone:\n"
                    + patching.unified(original, current, record.file.lstrip("/")))


@app.command()
def patches(
    host: Optional[str] = typer.Option(None, "--host", help="Host or tag (default: every host in the inventory)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """What orch has applied (or left drifted) on each host's files, and by which run."""
    inv = inventories.load(settings.inventory)
    chosen = inv.select(_split(host) or list(inv.hosts))
    store = _store()
    rows: list[dict[str, Any]] = []
    code = EXIT_OK
    for h, result in _each_host(chosen, lambda session: session.journal.status()):
        if isinstance(result, OrchError):
            ui.error(str(result))
            code = max(code, result.exit_code)
            continue
        for r in result:
            rows.append({"host": h.name, "run": r.run, "run_id": _run_id(store, r.run), "seq": r.seq, "name": r.name,
                         "target": r.target, "file": r.file, "state": r.state, "sha256_before": r.sha256_before,
                         "sha256_after": r.sha256_after, "backup": r.backup})
    if as_json:
        ui.raw(dumps(rows) + "\n")
    else:
        ui.patches(rows)
    raise typer.Exit(code)


def _run_id(store: Store, uid: str) -> int | None:
    try:
        return store.get(uid).id
    except OrchError:
        return None  # a run recorded in another database


@hosts_app.callback()
def hosts_list(ctx: typer.Context) -> None:
    """List the inventory's hosts."""
    if ctx.invoked_subcommand:
        return
    inv = inventories.load(settings.inventory)
    for h in inv.hosts.values():
        where = "this machine" if h.transport == "local" else f"{h.user + '@' if h.user else ''}{h.address or h.name}"
        extra = " (rehearsal)" if h.rehearsal else ""
        ui.console.print(f"{h.name}: {h.transport} {where}, {h.gpus} GPUs, workdir {h.workdir}{extra}"
                         + (f", tags {', '.join(h.tags)}" if h.tags else ""))


@hosts_app.command("check")
def hosts_check(
    hosts: Optional[str] = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: all)."),
    port: int = typer.Option(30000, "--port", help="Report whether this port is already listening on each host."),
    timeout: float = typer.Option(10.0, "--timeout", help="Seconds to wait for each host's SSH handshake."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Reachability, round-trip time, OS, Python, SGLang, GPUs, free disk and port per host (one round trip each)."""
    from . import hostfacts

    inv = inventories.load(settings.inventory)
    chosen = inv.select(_split(hosts) or list(inv.hosts))
    facts = asyncio.run(hostfacts.check_all(chosen, port, connect_timeout=timeout))
    if as_json:
        ui.raw(json.dumps([f.as_json() for f in facts], indent=2) + "\n")
    else:
        ui.host_facts(facts)
    unreachable = [f.host for f in facts if not f.reachable]
    if unreachable:  # after the report: stdout stays whole, the summary line goes to stderr with exit 3
        from .errors import HostError

        raise HostError(f"{len(unreachable)} of {len(facts)} hosts unreachable: {', '.join(unreachable)}; "
                        f"the report above says why for each")


@app.command()
def check(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Experiment file."),
    hosts: Optional[str] = typer.Option(None, "--hosts", help="Hosts or tags, comma-separated (default: the experiment's)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a param: key=value, or env.NAME=value."),
    variants: list[str] = typer.Option([], "--variant", help="Check only these variants (repeatable)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """EAGLE-3 checkpoint checks for every run the experiment would make; exit 2 on any error."""
    from . import check as checks

    spec, plans, chosen = _load(spec_path, hosts, overrides, variants)
    groups = asyncio.run(checks.check_plans(spec, plans, chosen))
    if as_json:
        ui.raw(dumps(groups) + "\n")
    else:
        ui.findings(groups)
    bad = any(f["severity"] == "error" for g in groups for f in g["findings"])
    raise typer.Exit(EXIT_BAD_INPUT if bad else EXIT_OK)


@app.command("import")
def import_log(
    log: str = typer.Argument(..., metavar="LOGFILE", help="Server log of a run made by hand: a local path, or "
                              "HOST:PATH for a log on an inventory host."),
    name: Optional[str] = typer.Option(None, "--name", help="Variant name (default: the file name)."),
    params: list[str] = typer.Option([], "--params", help="A param to record: key=value (repeatable)."),
    host: Optional[str] = typer.Option(None, "--host", help="The host the run was made on, to record (default: "
                                       "the HOST of HOST:PATH, else `imported`)."),
    debug_pattern: str = typer.Option(specs.DEFAULT_DEBUG_PATTERN, "--debug-pattern", help="Regex of debug lines."),
) -> None:
    """Record a run from its server log: metrics, debug lines, diagnosis, launch command; exit 1 if it failed."""
    from .store import SUCCEEDED

    from . import logimport

    source = _log_source(log, debug_pattern, logimport)
    done = logimport.record(_store(), source, name, logimport.parse_params(params), host, debug_pattern)
    ui.imported(done)
    raise typer.Exit(EXIT_OK if done.status == SUCCEEDED else EXIT_RUN_FAILED)


def _log_source(log: str, debug_pattern: str, logimport: Any) -> Any:
    """A local file when one is there; else HOST:PATH with a host of the inventory."""
    if Path(log).exists() or ":" not in log or not settings.inventory.exists():
        return logimport.read_local(Path(log))
    hosts = inventories.load(settings.inventory).hosts
    remote = logimport.split_remote(log, hosts)
    if remote is None:
        raise SpecError(f"{log}: no such file here, and {log.partition(':')[0]!r} is not a host of "
                        f"{settings.inventory}; give a local path or HOST:PATH")
    return asyncio.run(logimport.read_remote(hosts[remote[0]], remote[1], debug_pattern))


def _usage_error() -> type:
    """The base class of command-line usage errors (click's ClickException). Newer typer releases
    carry their own copy of click, so it is reached through a public subclass, not by import."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main() -> None:
    """Entry point: one-line errors with the right exit code."""
    try:
        code = app(standalone_mode=False)  # returns the code of a typer.Exit instead of raising it
    except OrchError as exc:
        ui.error(str(exc), exc.evidence)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        ui.error("interrupted; patches of the interrupted run were reverted")
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if isinstance(exc, _usage_error()):
            exc.show()
            sys.exit(EXIT_BAD_INPUT)
        raise
    sys.exit(code if isinstance(code, int) else EXIT_OK)


if __name__ == "__main__":
    main()
