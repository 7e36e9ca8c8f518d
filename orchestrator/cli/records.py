"""`orch ls`, `show`, `diff`, `series` and `logs`: reading the record of runs made."""

from __future__ import annotations

from typing import Any

import typer

import orchestrator
from . import completing, ui
from orchestrator.errors import SpecError
from .app import app, dumps, settings
from .compare import WHERE_HELP, emit

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
    as_json: bool = typer.Option(False, "--json", help="With each run's params, metrics and tags."),
    as_csv: bool = typer.Option(False, "--csv", help="A column per param, per metric and per tag (tag.KEY)."),
    mine: bool = typer.Option(False, "--mine", help="Only runs this user made (a team database holds everyone's)."),
    tags: list[str] = typer.Option([], "--tag", metavar="KEY[=VALUE]",
                                   help="Only runs with this tag (KEY=VALUE: that value, exactly; KEY: any value). "
                                        "Repeat: runs with all of them."),
) -> None:
    """List runs, oldest first (the newest `--limit`), or best first by `--sort`: the params that
    differ between them, accept_len, output_tok_s and the objective's metric, within the terminal."""
    if as_json and as_csv:
        raise SpecError("--json and --csv: give one of them")
    chosen = {"db": settings.db, "experiment": experiment, "status": status, "host": host, "where": where,
              "sort": sort, "limit": limit, "mine": mine, "tags": tags}
    if as_json:
        return emit(orchestrator.list_runs_json(**chosen))
    if as_csv:
        return emit(orchestrator.list_runs_csv(**chosen))
    from . import runtable  # here: --json and --csv load no rich

    runtable.show(ui.console, orchestrator.list_runs(**chosen))


@app.command()
def show(run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
         as_json: bool = typer.Option(False, "--json", help="The whole record as JSON."),
         requests: bool = typer.Option(False, "--requests", help="The workload's requests, one row each.")) -> None:
    """Everything recorded about one run (id, uid prefix, `last` or `last~N`)."""
    if requests:
        run_id = orchestrator.resolve_run(run_ref, db=settings.db)
        return _requests(run_id, orchestrator.run_requests(str(run_id), db=settings.db), as_json)
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
    everything: bool = typer.Option(False, "--all", help="Show everything: also what differs only by host or "
                                    "time (ports, host paths), unchanged metrics, equal params and debug fields."),
    as_json: bool = typer.Option(False, "--json", help="params, env, metrics (a, b, delta), patches, debug lines, "
                                 "command and the counts of what the table hides, as JSON."),
    where: list[str] = typer.Option([], "--where", help="With --vs: side A's conditions, key=value (params or variant)."),
    vs: list[str] = typer.Option([], "--vs", help="Side B: side A's conditions with these changed, key=value."),
) -> None:
    """Compare two runs: params, env, metrics with deltas, patches, debug fields, launch script;
    without what differs only by where the runs ran and the metrics they measured alike (`--all`).
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
        ui.diff(compared.a, compared.b, compared.shown(), compared.command_diff(), compared.hidden_text())


def _requests(run_id: int, rows: list[dict[str, Any]], as_json: bool = False, as_csv: bool = False,
              by_end: bool = False, quiet: bool = False) -> None:
    """The run's requests: in the order sent, or (`by_end`) in the order they ended."""
    if as_json:
        emit(dumps(rows) + "\n")
    elif as_csv:
        emit(ui.series_csv([_request_row(r) for r in rows]) if rows else "")
    elif rows:
        ui.series([_request_row(r) for r in rows], f"run {run_id} requests ({len(rows)})"
                  + (", in the order they ended" if by_end else ""))
    elif not quiet:
        ui.note(f"run {run_id} recorded no requests (its workload did not run, or it ran before orch kept them)")


def _request_row(row: dict[str, Any]) -> dict[str, Any]:
    """A request as a table row: its inter-token gaps as their median and max."""
    gaps = sorted(row["itl_ms"])
    shown = {k: v for k, v in row.items() if k != "itl_ms"}
    return {**shown, "itl_ms_p50": gaps[len(gaps) // 2] if gaps else None, "itl_ms_max": gaps[-1] if gaps else None}


@app.command()
def series(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
    kind: str = typer.Option("decode", "--kind", help="decode or prefill: which log lines' series; requests: the "
                                                      "workload's requests over the run."),
    as_csv: bool = typer.Option(False, "--csv", help="Comma-separated values, for a spreadsheet or a plot."),
) -> None:
    """A run's time series from its server log: one row per decode (or prefill) log line; with
    `--kind requests`, one per workload request in the order they ended (latency, accept length)."""
    run_id, rows = orchestrator.run_series(run_ref, db=settings.db, kind=kind)
    if kind == "requests":
        return _requests(run_id, rows, as_csv=as_csv, by_end=True)
    if not rows:
        ui.note(f"run {run_id} has no {kind} series: its log holds no {kind.capitalize()} batch lines")
    elif as_csv:
        ui.raw(ui.series_csv(rows))
    else:
        ui.series(rows, f"run {run_id} {kind} series ({len(rows)} log lines)")
    if not as_csv:  # and the workload's requests over the run
        ran = orchestrator.run_requests(str(run_id), db=settings.db, by_end=True)
        _requests(run_id, ran, by_end=True, quiet=True)


@app.command()
def logs(
    run_ref: str = typer.Argument(..., metavar="RUN", help=RUN_HELP, autocompletion=completing.runs),
    follow: bool = typer.Option(False, "--follow", "-f", help="Follow the live log of a running run."),
    debug: bool = typer.Option(False, "--debug", help="Only the debug lines."),
    node: int = typer.Option(0, "--node", help="A run over several hosts: the log of this node rank (0: rank 0's)."),
) -> None:
    """Print a run's server log (stored at the end of the run, or live from the host)."""
    text = orchestrator.run_log(run_ref, db=settings.db, inventory=settings.inventory, follow=follow, debug=debug,
                                node=node, write=ui.raw_outside)
    if text:
        ui.raw_outside(text)
