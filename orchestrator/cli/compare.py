"""`orch compare`: which configuration of an experiment wins, and which others are within noise."""

from __future__ import annotations

import csv
import io
import sys
from typing import Any

import typer

from orchestrator.core import compare as comparing, objective as objectives
from orchestrator.errors import SpecError
from . import ui
from .app import _reader, app, dumps

WHERE_HELP = ("Only runs whose param has this value as the engine ran it: key=value (a number or true/false as `--set` "
              "reads it); asked.key=value the command's value, effective.key=value the engine's print alone. Repeatable.")


def parse_where(items: list[str], option: str = "--where") -> dict[str, Any]:
    if not items:
        return {}
    from orchestrator.core.spec import literal  # only here: a command without --where reads no experiment file

    where: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"{option} {item!r}: expected key=value, e.g. {option} speculative_num_steps=3")
        where[key.strip()] = literal(value.strip())
    return where


def load(store: Any, experiment: str, where: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The experiment's succeeded runs matching `where`, and the count of runs left out per other status."""
    from orchestrator.store import queries
    from orchestrator.store.reading import SUCCEEDED, shown

    counts = queries.status_counts(store, experiment)
    if not counts:
        known = queries.experiments(store)
        raise SpecError(f"no experiment {experiment!r} in {shown(store.url)}{comparing.did_you_mean(experiment, known)}"
                        f"; see `orch ls` (experiments: {', '.join(known) or 'none'})")
    runs = queries.comparable_runs(store, experiment)
    comparing.check_keys(where, {k for r in runs for k in view(r)}, f"of {experiment!r}")
    chosen = [r for r in runs if comparing.matches(view(r), where)]
    left_out = {s: n for s, n in counts.items() if s != SUCCEEDED and n}
    if where:
        left_out["not matching --where"] = len(runs) - len(chosen)
    return chosen, left_out


def view(run: dict[str, Any]) -> dict[str, Any]:
    """What `--where` matches: the run's params as they ran, its variant, `asked.k`, `effective.k`."""
    return comparing.where_view(run["variant"], run["params"], run.get("effective"))


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
    from orchestrator.core.defaults import HOST_SPECIFIC_PARAMS

    if as_json and as_csv:
        raise SpecError("--json and --csv: give one of them")
    runs, left_out = load(_reader(), experiment, parse_where(where))
    if not runs:
        raise SpecError(f"experiment {experiment!r} has no succeeded run{' matching --where' if where else ''} "
                        f"to compare ({_left_out(left_out)}); see `orch ls -e {experiment}`")
    result = comparing.compare(experiment, runs, left_out, comparing.objective_of(runs, by.strip()), HOST_SPECIFIC_PARAMS)
    if as_json:
        emit(dumps(comparing.as_json(result)) + "\n")
    elif as_csv:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(comparing.csv_rows(result))
        emit(out.getvalue())
    else:
        table(result, len(runs), _columns(result, metrics))


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
    named = objectives.metrics(c.objective)  # the ranked one and each constraint's, steady or not
    return [m for m in dict.fromkeys((*named, *HEADLINE)) if m in varying or m in named]


def table(c: comparing.Comparison, counted: int, shown: list[str]) -> None:
    from .text import line  # here, not at the top: `orch --help` does without rich
    from rich.table import Table

    direction = "lower is better" if c.objective.lower else "higher is better"
    constraints = ", ".join(map(str, c.objective.subject_to))
    subject = f" subject to {constraints}" if constraints else ""
    ui.console.print(f"[bold]{line(c.experiment)}[/]: {counted} succeeded run(s) in {len(c.groups)} configuration(s)"
                     f"; left out: {_left_out(c.left_out)}", soft_wrap=True)
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
    """`orch diff EXPERIMENT --where ... --vs ...`: side A matches --where, side B the same with --vs
    changing (or adding) conditions; each side must be one configuration."""
    from orchestrator.core.defaults import HOST_SPECIFIC_PARAMS

    where, vs = parse_where(where_items), parse_where(vs_items, "--vs")
    every, _ = load(_reader(), experiment, {})
    known = {k for r in every for k in view(r)}
    for option, conditions in (("--where", where), ("--vs", vs)):
        comparing.check_keys(conditions, known, f"of {experiment!r}", option)
    sides = []
    for side, conditions in (("A", where), ("B", {**where, **vs})):
        chosen = [r for r in every if comparing.matches(view(r), conditions)]
        sides.append(comparing.one_configuration(comparing.group(chosen, HOST_SPECIFIC_PARAMS), side, conditions))
    a, b = sides
    rows = comparing.side_by_side(a, b)
    if as_json:
        emit(dumps(comparing.side_by_side_json(a, b, rows)) + "\n")
        return
    from .text import line  # here, not above: `orch --help` and --json do without rich
    from rich.table import Table

    data = comparing.side_by_side_json(a, b, rows)
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


def _left_out(left_out: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in left_out.items()) or "none"
