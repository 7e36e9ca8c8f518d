"""`orch ls`, `show`, `diff`, `series` and `logs`: reading the record of runs made."""

from __future__ import annotations

from typing import Any

import typer

import orchestrator
from orchestrator.core import inventory as inventories
from . import completing, ui
from orchestrator.errors import SpecError
from .app import _reader, app, dumps, settings
from .compare import WHERE_HELP, emit, parse_where

RUN_HELP = "A run: its id (12), a unique prefix of its uid, `last` or `last~N`."


@app.command("ls")
def list_runs(
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="Only runs of this experiment.",
                                             autocompletion=completing.experiments),
    status: str | None = typer.Option(None, "--status", help="Only runs with this status: running, succeeded, "
                                         "failed or interrupted."),
    host: str | None = typer.Option(None, "--host", help="Only runs on this host."),
    where: list[str] = typer.Option([], "--where", help=WHERE_HELP),
    sort: str | None = typer.Option(None, "--sort", metavar="METRIC",
                                       help="Best first by this metric (durations ascending, the rest descending)."),
    limit: int = typer.Option(50, "--limit", "-n", help="How many runs: the newest N (with --sort, the N best)."),
    as_json: bool = typer.Option(False, "--json", help="With each run's params and metrics."),
    as_csv: bool = typer.Option(False, "--csv", help="A column per param and per metric."),
    mine: bool = typer.Option(False, "--mine", help="Only runs this user made (a team database holds everyone's)."),
) -> None:
    """List runs, oldest first (the newest `--limit`), or best first by `--sort`."""
    from orchestrator.store.reading import current_user

    from . import listing

    if as_json and as_csv:
        raise SpecError("--json and --csv: give one of them")
    store = _reader()
    listing.check(store, status, sort)
    filters = {"experiment": experiment, "status": status, "host": host, "user": current_user() if mine else None}
    if as_json and not where and not sort:
        return emit(listing.json_listing(store, filters, limit))
    rows, metrics = listing.select(store, filters, parse_where(where), sort, limit, as_text=as_json)
    if as_json:
        emit(listing.json_text(rows, metrics))
    elif as_csv:
        emit(listing.as_csv(rows, metrics))
    else:
        ui.runs(rows, {sort: {r.id: metrics.get(r.id, {}).get(sort) for r in rows}} if sort else None)


@app.command()
def show(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
         as_json: bool = typer.Option(False, "--json", help="The whole record as JSON."),
         requests: bool = typer.Option(False, "--requests", help="The workload's requests, one row each.")) -> None:
    """Everything recorded about one run (id, uid prefix, `last` or `last~N`)."""
    if requests:
        from orchestrator.store import reading

        store = _reader()
        return _requests(store, reading.get(store, run_ref), as_json)
    record = orchestrator.show_run(run_ref, db=settings.db)
    if as_json:
        emit(dumps(record) + "\n")
    else:
        ui.show(record)


@app.command()
def diff(
    run_a: str = typer.Argument("last~1", metavar="RUN_A", help="The first run, or an experiment's name with --vs.",
                                autocompletion=completing.runs),
    run_b: str = typer.Argument("last", metavar="RUN_B", help="The second run.", autocompletion=completing.runs),
    everything: bool = typer.Option(False, "--all", help="Also show params and debug fields that are equal."),
    as_json: bool = typer.Option(False, "--json", help="params, env, metrics (a, b, delta), patches, debug lines "
                                 "and command, as JSON."),
    where: list[str] = typer.Option([], "--where", help="With --vs: side A's conditions, key=value (params or variant)."),
    vs: list[str] = typer.Option([], "--vs", help="Side B: side A's conditions with these changed, key=value."),
) -> None:
    """Compare two runs: params, env, metrics with deltas, patches, debug fields, launch script.
    `orch diff EXPERIMENT --where k=v --vs k=w` compares two configurations' repeats instead."""
    if vs:
        from .compare import diff_configurations

        if run_b != "last":
            raise SpecError(f"--vs compares two configurations of one experiment: give only EXPERIMENT, not {run_b!r}")
        diff_configurations(run_a, where, vs, as_json)
        return
    if where:
        raise SpecError("--where in orch diff names side A of two configurations: give side B with --vs k=v")
    compared = orchestrator.diff_runs(run_a, run_b, db=settings.db, everything=everything)
    if as_json:
        emit(dumps(compared.as_json()) + "\n")
    else:
        ui.diff(compared.a, compared.b, compared.rows, compared.command_diff())


def _requests(store: Any, run_row: Any, as_json: bool, as_csv: bool = False, by_end: bool = False,
              quiet: bool = False) -> None:
    """The run's requests: in the order sent, or (`by_end`) in the order they ended."""
    from orchestrator.store import reading

    rows = reading.requests(store, run_row.id)
    if by_end:
        rows.sort(key=lambda r: r["at_s"])
    if as_json:
        emit(dumps(rows) + "\n")
    elif as_csv:
        emit(ui.series_csv([_request_row(r) for r in rows]) if rows else "")
    elif rows:
        ui.series([_request_row(r) for r in rows], f"run {run_row.id} requests ({len(rows)})"
                  + (", in the order they ended" if by_end else ""))
    elif not quiet:
        ui.note(f"run {run_row.id} recorded no requests (its workload did not run, or it ran before orch kept them)")


def _request_row(row: dict[str, Any]) -> dict[str, Any]:
    """A request as a table row: its inter-token gaps as their median and max."""
    gaps = sorted(row["itl_ms"])
    shown = {k: v for k, v in row.items() if k != "itl_ms"}
    return {**shown, "itl_ms_p50": gaps[len(gaps) // 2] if gaps else None, "itl_ms_max": gaps[-1] if gaps else None}


SERIES_KINDS = ("decode", "prefill", "requests")


@app.command()
def series(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
    kind: str = typer.Option("decode", "--kind", help="decode or prefill: which log lines' series; requests: the "
                                                      "workload's requests over the run."),
    as_csv: bool = typer.Option(False, "--csv", help="Comma-separated values, for a spreadsheet or a plot."),
) -> None:
    """A run's time series from its server log: one row per decode (or prefill) log line; with
    `--kind requests`, one per workload request in the order they ended (latency, accept length)."""
    if kind not in SERIES_KINDS:
        raise SpecError(f"--kind {kind!r}: expected one of {', '.join(SERIES_KINDS)}")
    from orchestrator.store import reading

    store = _reader()
    run_row = reading.get(store, run_ref)
    if kind == "requests":
        return _requests(store, run_row, False, as_csv, by_end=True)
    rows = [row for row in reading.record(store, run_row)["series"] if row["kind"] == kind]
    if not rows:
        ui.note(f"run {run_row.id} has no {kind} series: its log holds no {kind.capitalize()} batch lines")
    elif as_csv:
        ui.raw(ui.series_csv(rows))
    else:
        ui.series(rows, f"run {run_row.id} {kind} series ({len(rows)} log lines)")
    if not as_csv:  # and the workload's requests over the run
        _requests(store, run_row, False, False, by_end=True, quiet=True)


@app.command()
def logs(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
    follow: bool = typer.Option(False, "--follow", "-f", help="Follow the live log of a running run."),
    debug: bool = typer.Option(False, "--debug", help="Only the debug lines."),
    node: int = typer.Option(0, "--node", help="A run over several hosts: the log of this node rank (0: rank 0's)."),
) -> None:
    """Print a run's server log (stored at the end of the run, or live from the host)."""
    from orchestrator.store import reading

    store = _reader()
    run_row = reading.get(store, run_ref)
    if node:
        nodes = reading.node_logs(store, run_row.id)
        if node not in nodes:
            ranks = ", ".join(str(n) for n in (0, *nodes)) if nodes else "0 (it ran on one host)"
            raise SpecError(f"run {run_row.id} has no log of node {node}; its nodes: {ranks}")
        ui.raw_outside(nodes[node][1].decode(errors="replace"))
        return
    if debug:
        for line in reading.record(store, run_row)["debug_lines"]:
            ui.raw_outside(line["text"] + "\n")
        return
    if follow and run_row.status == reading.RUNNING:
        import asyncio  # here, not at the top: `orch --help` does without it
        asyncio.run(_follow(run_row))
        return
    data = reading.log(store, run_row.id)
    if data is None:
        raise SpecError(f"run {run_row.id} has no stored log yet; `orch logs {run_row.id} --follow` reads it live")
    ui.raw_outside(data.decode(errors="replace"))


async def _follow(run_row: Any) -> None:
    import asyncio

    from orchestrator.host import server
    from orchestrator.host.session import HostSession

    inv = inventories.load(settings.inventory)
    host = inv.select([run_row.host])[0]
    session = await HostSession.open(host)
    srv = server.Server(f"{session.host.workdir}/runs/{run_row.uid}", 0, 0)
    offset = 0
    try:
        while True:
            status = await server.poll(session.conn, srv, offset)
            offset += len(status.new_bytes)
            ui.raw_outside(status.new_bytes.decode(errors="replace"))
            if status.exit_code is not None or not status.alive:
                break
            await asyncio.sleep(0.5)
    finally:
        await session.conn.close()
