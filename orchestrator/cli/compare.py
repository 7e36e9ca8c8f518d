"""`orch compare`: which configuration of an experiment wins, and which others are within noise."""

from __future__ import annotations

import sys

import typer

from orchestrator.api import compare as comparing
from orchestrator.errors import SpecError
from . import ui
from .app import app, dumps, settings

WHERE_HELP = ("Only runs whose param has this value as the engine ran it: key=value (a number or true/false as `--set` "
              "reads it); asked.key=value the command's value, effective.key=value the engine's print alone; "
              "tag.key=value a tag (`orch tag`). Repeatable.")


@app.command("compare")
def compare_command(
    experiment: str = typer.Argument(..., metavar="EXPERIMENT", help="The experiment's name, as `orch ls` shows it."),
    where: list[str] = typer.Option([], "--where", help=WHERE_HELP),
    by: str = typer.Option("", "--by", help="The metric that ranks configurations, under the experiment's constraints "
                           "(default: its `objective:`, else output_tok_s; lower-is-better for durations)."),
    as_json: bool = typer.Option(False, "--json", help="Every row's params, variants, patches, run ids and per "
                                 "metric n/median/min/max."),
    as_csv: bool = typer.Option(False, "--csv", help="A row per configuration, METRIC_median/_min/_max columns."),
    metrics: str = typer.Option("", "--metrics", help="The table's metric columns, comma-separated, or `all` "
                                "(default: the headline ones; --json and --csv carry every metric)."),
) -> None:
    """One row per configuration of an experiment, repeats aggregated (n, median, min-max), the best marked."""
    if as_json and as_csv:
        raise SpecError("--json and --csv: give one of them")
    if as_csv:
        return emit(comparing.compare_csv(experiment, db=settings.db, where=where, by=by))
    found = comparing.compare_configurations(experiment, db=settings.db, where=where, by=by)
    if as_json:
        emit(dumps(comparing.as_json(found.comparison)) + "\n")
    else:
        table(found.comparison, found.counted, _columns(found.comparison, metrics))


# The table's metric columns unless --metrics says otherwise: the headline measures, one latency
# of each kind; the rest (the other percentiles, token counts) are in --json / --csv.
HEADLINE = ("output_tok_s", "accept_len", "accept_rate", "ttft_ms_p50", "itl_ms_p50", "e2e_ms_p99", "startup_s")


def _columns(c: comparing.Comparison, asked: str) -> list[str]:
    """The metrics the table shows: `--metrics` (checked: an unknown one is an error naming the
    known), or the ranking metric and the headline ones the runs have."""
    varying = [m for m in c.metrics if m not in c.steady]
    if asked.strip() == "all":
        return varying
    if asked.strip():
        names = [m.strip() for m in asked.split(",") if m.strip()]
        for name in names:
            if name not in c.metrics:
                raise SpecError(f"--metrics {name!r}: no run of {c.experiment!r} records it"
                                f"{comparing.did_you_mean(name, c.metrics)}; metrics: {', '.join(c.metrics)}")
        return names
    named = comparing.objective_metrics(c.objective)  # the ranked one and each constraint's, steady or not
    return [m for m in dict.fromkeys((*named, *HEADLINE)) if m in varying or m in named]


def table(c: comparing.Comparison, counted: int, shown: list[str]) -> None:
    from .text import line  # here, not at the top: `orch --help` does without rich
    from rich.table import Table

    direction = "lower is better" if c.objective.lower else "higher is better"
    constraints = ", ".join(map(str, c.objective.subject_to))
    subject = f" subject to {constraints}" if constraints else ""
    ui.console.print(f"[bold]{line(c.experiment)}[/]: {counted} succeeded run(s) in {len(c.groups)} configuration(s)"
                     f"; left out: {comparing.left_out_text(c.left_out)}", soft_wrap=True)
    if c.constant:
        ui.console.print("constant: " + line(", ".join(f"{k}={ui.fmt(v)}" for k, v in c.constant.items())),
                         soft_wrap=True)
    if c.steady:
        ui.console.print("same in every run: " + ", ".join(f"{m}={ui.fmt(v)}" for m, v in c.steady.items()),
                         soft_wrap=True)
    grid = Table(title=f"by {c.by} ({direction}){subject}: median (min-max) over n runs", title_justify="left")
    fails = ["fails"] if constraints else []
    for column in ("", *c.varying, "n", *fails, *shown):
        grid.add_column(column)
    for g in c.groups:
        cells = [_stat(g.stat(m)) for m in shown]
        style = {"best": "[bold green]best[/]", "within noise": "[yellow]within noise[/]"}.get(g.mark, "")
        failed = [f"[red]{line('; '.join(g.failed))}[/]" if g.failed else ""] if fails else []
        grid.add_row(style, *(line(ui.fmt(comparing.cell(g, k))) for k in c.varying), str(len(g.run_ids)), *failed, *cells)
    ui.console.print(grid)
    for merged in filter(None, (g.ran_as_one() for g in c.groups)):  # asked apart, ran alike: one row
        ui.console.print(line(merged), soft_wrap=True)
    best = c.groups[0]
    if best.mark:
        named = ", ".join(f"{k}={ui.fmt(comparing.cell(best, k))}" for k in c.varying) or "the only configuration"
        noise = sum(g.mark == comparing.NOISE for g in c.groups)
        ui.console.print(f"best by {c.by}{subject}: {line(named)} (runs {', '.join(map(str, best.run_ids))}); "
                         f"{noise} other configuration(s) within noise", soft_wrap=True)
    elif constraints:
        ui.console.print(f"no configuration meets {constraints}: none is the best; loosen `objective.subject_to` "
                         "or sweep further", soft_wrap=True)
    hidden = [m for m in c.metrics if m not in c.steady and m not in shown]
    if hidden:
        ui.console.print(f"{len(hidden)} more metric(s) not shown ({', '.join(hidden)}): "
                         "--metrics NAME,... or --metrics all; --json and --csv carry every one", soft_wrap=True)


def diff_configurations(experiment: str, where_items: list[str], vs_items: list[str], as_json: bool) -> None:
    """`orch diff EXPERIMENT --where ... --vs ...`: the two configurations' repeats side by side."""
    found = comparing.diff_configurations(experiment, db=settings.db, where=where_items, vs=vs_items)
    a, b, rows = found.a, found.b, found.rows
    if as_json:
        emit(dumps(found.as_json()) + "\n")
        return
    from .text import line  # here, not above: `orch --help` and --json do without rich
    from rich.table import Table

    data = found.as_json()
    for side, g in (("A", a), ("B", b)):
        ui.console.print(f"[bold]{side}[/]: {line(', '.join(g.variants))}, runs {', '.join(map(str, g.run_ids))}",
                         soft_wrap=True)
    params = Table(title="params", title_justify="left")
    for column in ("param", "A", "B"):
        params.add_column(column)
    for key, pair in data["params"].items():
        params.add_row(line(key), line(ui.fmt(pair["a"])), line(ui.fmt(pair["b"])))
    if a.patches != b.patches:
        params.add_row("patches", line("+".join(a.patches)), line("+".join(b.patches)))
    ui.console.print(params)
    grid = Table(title="metrics: median (min-max) over n runs; noise when the ranges overlap", title_justify="left")
    for column in ("metric", "A", "B", "delta", ""):
        grid.add_column(column)
    for r in rows:
        grid.add_row(r.metric, _side(r.a), _side(r.b), "-" if r.delta is None else f"{r.delta:+.3g}",
                     "[yellow]noise[/]" if r.noise else "")
    ui.console.print(grid)


def emit(text: str) -> None:
    """Machine-readable output (--json, --csv) straight to stdout: without rich, which tables need."""
    sys.stdout.write(text)
    sys.stdout.flush()


def _side(s: comparing.Stat | None) -> str:
    return "-" if s is None else f"{_stat(s)} n={s.n}"


def _stat(s: comparing.Stat | None) -> str:
    if s is None:
        return "-"
    if s.low == s.high:
        return ui.fmt(s.median)
    return f"{ui.fmt(s.median)} ({ui.fmt(s.low)}-{ui.fmt(s.high)})"
