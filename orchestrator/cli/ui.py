"""All printing: progress lines, tables, run details, diffs, errors."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from orchestrator.records import MetricInfo
from . import checked, live, swept, tagged
from .text import block, fmt as fmt, line, visible  # fmt: ui.fmt to the commands

if TYPE_CHECKING:
    from orchestrator import Stage

# Tables keep their shape when output goes to a file or a pipe (rich assumes 80 columns there).
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(highlight=False, width=_WIDTH)
errors = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)
STATUS_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}


def progress(label: str, message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    first, *rest = message.rstrip("\n").split("\n")  # on newlines only: a CR is shown, not a line break
    console.print(f"[dim]{stamp}[/] [bold]{line(label)}[/] {block(first)}")
    for more in rest:  # on a terminal wrapped at its width, as the live table is; elsewhere whole
        console.print(f"         {block(more)}", soft_wrap=not console.is_terminal)


def error(message: str, evidence: tuple[str, ...] = ()) -> None:
    reporter.stop()  # below a live table, not through it: its last state stays on the screen
    errors.print(f"[red]error:[/] {line(message)}", soft_wrap=True)
    for said in evidence:
        errors.print(f"  [dim]|[/] {line(said)}", soft_wrap=True)


def progress_done() -> None:
    """The end of a sweep's progress: the live table stopped, the counts of repeated warnings."""
    for tally in reporter.finish():
        console.print(f"[yellow]{line(tally)}[/]", soft_wrap=True)


# the summary's param columns: their names, and each run's values (by run id) as it recorded them
Params = tuple[tuple[str, ...], dict[Any, dict[str, Any]]]


def summary(outcomes: list[Any], metrics: tuple[MetricInfo, ...], params: Params | None = None) -> None:
    """The runs of one `orch run`, with a column per param that tells its plans apart (`matrix_params`)
    and the metrics its engine declares. The live table (or the log) ends first, with the counts of
    the warnings given more than once."""
    progress_done()
    outcomes = [o for o in outcomes if o.run_id is not None]  # a plan that never ran: `not_run`'s one line
    if not outcomes:
        return
    names, values = params or ((), {})
    headers = swept.labels(names) if console.is_terminal else {name: name for name in names}  # a terminal's room
    table = Table(title="runs", title_justify="left")
    for column in ("run", "variant", *headers.values(), "host", "status", *(m.label for m in metrics), "flags / error"):
        table.add_column(column)
    for o in outcomes:
        note = ", ".join(o.flags) if o.flags else ""
        if o.error:
            note = (note + "; " if note else "") + o.error
        own = values.get(o.run_id, {})
        shown = (line(fmt(own.get(name))) for name in names)
        measured = (fmt(o.metrics.get(m.name)) for m in metrics)
        table.add_row(fmt(o.run_id), line(o.variant), *shown, line(o.host),
                      f"[{STATUS_STYLE.get(o.status, '')}]{o.status}[/]", *measured, line(note))
    console.print(table)


def not_run(outcomes: list[Any]) -> None:
    """The plans that never became runs, one line per reason (a busy host refuses all its plans
    at once: one line says so, not one per plan)."""
    counts: dict[str, int] = {}
    for o in outcomes:
        if o.run_id is None and o.error:
            counts[o.error] = counts.get(o.error, 0) + 1
    for why, n in counts.items():
        error(why if n == 1 else f"{n} plan(s) not run: {why}")


def matrix_params(plans: list[Any], outcomes: list[Any], store: Any) -> Params:
    """The params that tell the plans apart: the matrix's keys, then every other param whose value
    differs between plans (variants), host-specific ones (a port) aside; each run's values read from
    its row, as rendered for its host."""
    names = swept.param_names(plans)
    if not names:
        return (), {}
    return tuple(names), {o.run_id: store.get(str(o.run_id)).params for o in outcomes if o.run_id is not None}


def show(record: dict[str, Any]) -> None:
    c = console
    c.print(f"[bold]run {record['id']}[/] {line(record['uid'])}  {line(record['experiment'])}/{line(record['variant'])} "
            f"on {line(record['host'])}  [{STATUS_STYLE.get(record['status'], '')}]{record['status']}[/]")
    c.print(f"started {record['started_at']}  ended {record['ended_at'] or '-'}")
    if record.get("server_run_id") not in (None, record["id"]):
        c.print(f"server: the one run {record['server_run_id']} launched (its command is this run's launch; "
                "this run launched nothing)")
    if record["flags"]:
        c.print(f"[yellow]flags:[/] {line(', '.join(record['flags']))}")
    tagged.shown(c, record)
    if record["error"]:
        c.print(f"[red]error:[/] {line(record['error'])}", soft_wrap=True)
    if record.get("diagnosis"):
        c.print(f"[red]diagnosis:[/] {line(record['diagnosis']['summary'])}", soft_wrap=True)
        for said in record["diagnosis"]["evidence"]:
            c.print(f"  [dim]|[/] {line(said)}", soft_wrap=True)
    _pairs("params", record["params"])
    _pairs("env", record["env"])
    checkpoints_and_preflight(record)
    table = Table(title="metrics", title_justify="left")
    for column in ("metric", "value", "source", "note"):
        table.add_column(column)
    for name, sources in record["metric_sources"].items():
        for s in sources:
            table.add_row(line(name), fmt(s["value"]), line(s["source"]), line(s["note"]))
    c.print(table)
    for name, histogram in record.get("histograms", {}).items():
        histogram_lines(name, histogram)
    if record["patches"]:
        table = Table(title="patches", title_justify="left")
        for column in ("name", "file", "sha256 before", "sha256 after", "state"):
            table.add_column(column)
        for p in record["patches"]:
            table.add_row(line(p["name"]), line(p["file"]), line(p["sha256_before"][:12]), line(p["sha256_after"][:12]),
                          line(p["state"]))
        c.print(table)
    if record["debug_lines"]:
        c.print(f"[bold]debug lines[/] ({len(record['debug_lines'])}):")
        for d in record["debug_lines"][:10]:
            c.print(f"  {line(d['text'])}", soft_wrap=True)
        if len(record["debug_lines"]) > 10:
            c.print(f"  ... {len(record['debug_lines']) - 10} more (`orch logs {record['id']} --debug`)")


def histogram_lines(name: str, histogram: dict[str, Any]) -> None:
    """A run's histogram: each bin's count and share; for verify steps by draft tokens accepted, the
    accept length they imply (mean accepted + the bonus token)."""
    counts = histogram["counts"]
    total = sum(counts)
    console.print(f"[bold]{line(name)}[/] ({line(histogram['source'])}: {line(histogram['note'])}):", soft_wrap=True)
    if not total:
        console.print("  (empty)")
        return
    console.print("  " + "  ".join(f"{i}: {n} ({100 * n / total:.1f}%)" for i, n in enumerate(counts)), soft_wrap=True)
    mean = sum(i * n for i, n in enumerate(counts)) / total
    console.print(f"  {total} verify steps; mean {mean:.2f} draft tokens accepted per step, accept length "
                  f"{mean + 1:.2f} with the bonus token")


def _pairs(title: str, values: dict[str, Any]) -> None:
    if values:
        console.print(f"[bold]{title}:[/] " + "  ".join(f"{line(k)}={line(fmt(v))}" for k, v in values.items()),
                      soft_wrap=True)


def diff(a: dict[str, Any], b: dict[str, Any], rows: list[Any], command: list[str], hidden: str = "") -> None:
    """`orch diff`: the rows and launch-script lines shown; `hidden` says what was left out."""
    for side, run in (("a", a), ("b", b)):
        console.print(f"[bold]{side}[/] = run {run['id']} {line(run['experiment'])}/{line(run['variant'])} on "
                      f"{line(run['host'])} ({line(run['status'])})")
    table = Table()
    for column in ("section", "key", "a", "b", "delta"):
        table.add_column(column)
    last = None
    for r in rows:
        table.add_row(line(r.section) if r.section != last else "", line(r.key), line(fmt(r.a)), line(fmt(r.b)),
                      _delta(r))
        last = r.section
    if rows:
        console.print(table)
    if command:
        console.print("[bold]launch script[/]:")
        for changed in command:
            style = "green" if changed.startswith("+") else "red" if changed.startswith("-") else "dim"
            console.print(f"  [{style}]{line(changed)}[/]", soft_wrap=True)
    if hidden:
        console.print(f"[dim]{line(hidden)}[/]", soft_wrap=True)


def _delta(row: Any) -> str:
    if row.delta is None:
        return ""
    whole = all(isinstance(v, (int, float)) and float(v).is_integer() for v in (row.a, row.b))
    return f"{row.delta:+.0f}" if whole else f"{row.delta:+.3f}"


def series_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The columns of a series in first-seen order, leaving out the kind and columns with no value."""
    columns: dict[str, None] = {"time": None, "ranks": None}  # first, when present
    for row in rows:
        columns.update((k, None) for k, v in row.items() if k != "kind" and v is not None)
    return [c for c in columns if any(row.get(c) is not None for row in rows)]


def series(rows: list[dict[str, Any]], title: str) -> None:
    columns = series_columns(rows)
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="left" if column in ("time", "ranks") else "right")
    for row in rows:
        table.add_row(*(f"{v:.2f}" if isinstance(v := row.get(column), float) else line(fmt(v)) for column in columns))
    console.print(table)


def series_csv(rows: list[dict[str, Any]]) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=series_columns(rows), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def note(message: str) -> None:
    errors.print(block(message), soft_wrap=True)


def raw(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def raw_outside(text: str) -> None:
    """Text from a host or a log as it is: exact into a file or a pipe; on a terminal, with its
    control characters shown (an ESC sequence in a log could otherwise rewrite the screen)."""
    raw(visible(text, block=True) if sys.stdout.isatty() else text)


def host_facts(facts: list[Any]) -> None:
    """`orch hosts check`: one row per host; unreachable hosts show why."""
    table = Table()
    for column in ("host", "rtt ms", "os", "python", "engines", "gpus", "disk free", "port"):
        table.add_column(column)
    for f in facts:
        if not f.reachable:
            table.add_row(line(f.host), "[red]unreachable[/]", "", "", "", "", "", "")
            continue
        found = "; ".join(f"{_package_name(name, p)} {p['version'] or '?'} {p['dir']}"
                          for name, p in f.packages.items()) or _rehearsed(f)
        gpus = f"{len(f.gpus)}x {f.gpus[0].name}" if f.gpus else "-"
        if f.gpu_processes:
            gpus += f" ({len(f.gpu_processes)} procs)"
        disk = "-" if f.disk_free_bytes is None else f"{f.disk_free_bytes / 2**30:.1f} GiB"
        port = f"{f.port} [red]in use[/]" if f.port_listening else f"{f.port} free"
        python = line(f.python) if f.python else f"[red]{line(f.python_error)}[/]"
        table.add_row(line(f.host), fmt(f.rtt_ms), line(f.os or "-"), python, line(found), line(gpus), disk, port)
    console.print(table)
    for f in facts:
        if not f.reachable:  # below the table: the reasons are long and name what to do
            console.print(f"[red]unreachable:[/] {line(f.error or f.host)}", soft_wrap=True)


def _rehearsed(facts: Any) -> str:
    """A rehearsal host's engine before its first run installed the stand-in; "-" elsewhere."""
    return f"rehearsal {facts.rehearsal} (installed by the first run)" if facts.rehearsal else "-"


def _package_name(package: str, found: dict[str, str]) -> str:
    """The package, or `DIST (package)` where a distribution of another name installed it."""
    owner = found.get("distribution")
    return f"{owner} ({package})" if owner and owner.lower().replace("_", "-") != package else package


def patches(rows: list[dict[str, Any]]) -> None:
    """`orch patches`: what orch has changed on each host, by which run."""
    if not rows:
        console.print("no patches applied on the chosen hosts")
        return
    table = Table()
    for column in ("host", "run", "patch", "file", "state"):
        table.add_column(column)
    style = {"applied": "cyan", "drifted": "red", "pending": "yellow"}
    for r in rows:
        run = f"{r['run_id']} ({r['run']})" if r["run_id"] is not None else r["run"]
        table.add_row(line(r["host"]), line(run), line(f"{r['name']} #{r['seq']}"), line(r["file"]),
                      f"[{style.get(r['state'], '')}]{line(r['state'])}[/]")
    console.print(table)
    if any(r["state"] == "drifted" for r in rows):
        hosts = sorted({r["host"] for r in rows if r["state"] == "drifted"})
        console.print("drifted files changed after orch patched them; the originals are kept in the journal; "
                      + "; ".join(f"`orch revert --host {h} --force` restores {h}'s" for h in hosts), soft_wrap=True)


# -- checkpoints: push progress, preflight findings ---------------------------------------------

SEVERITY_STYLE = checked.SEVERITY_STYLE  # a finding's severity, styled as `orch check` styles it


def transfer(label: str) -> Callable[[str, int], None]:
    """A progress callback for one checkpoint push: a bar with bytes/s and ETA once bytes move."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    state: dict[str, Any] = {"bar": None, "task": None}

    def on(kind: str, amount: int) -> None:
        if kind == "total" and amount > 0:
            bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                           TimeRemainingColumn(), console=console)
            state.update(bar=bar, task=bar.add_task(line(label), total=amount))
            bar.start()
        elif kind == "advance" and state["bar"] is not None:
            state["bar"].advance(state["task"], amount)
        elif kind == "end" and state["bar"] is not None:  # also after a failed push: the terminal is left clean
            state["bar"].stop()
            state["bar"] = None

    return on


class Plain:
    """The Reporter of `orch run` off a terminal (`run/attempt.py`): a timestamped line per message,
    a bar per checkpoint push; each warning, finding and diff once per sweep (`live.Repeats`)."""

    def __init__(self) -> None:
        self.repeats = live.Repeats()

    def expect(self, plans: list[Any]) -> None:
        return None  # each run's lines name it; the summary has a column per swept param

    def message(self, label: str, text: str) -> None:
        if text.startswith(live.WARNING):
            self.warning(label, text[len(live.WARNING):])
        elif (shown := self.repeats.message(label, text)) is not None:
            progress(label, shown)

    def warning(self, label: str, text: str) -> None:
        if self.repeats.warning(label, text):
            progress(label, f"{live.WARNING}{text}")

    def transfer(self, label: str) -> Callable[[str, int], None]:
        return transfer(label)

    def stage(self, label: str, stage: Stage) -> None:
        return None  # each stage's own lines say what it does; a line per stage name would only repeat them

    def known(self, label: str, values: dict[str, Any]) -> None:
        return None  # the run's lines and the summary say it

    def stop(self) -> None:
        return None  # nothing drawn in place

    def finish(self) -> list[str]:
        """The counts of what was said once (`live.Repeats.finish`)."""
        return self.repeats.finish()


# on a terminal, one row per run updated in place; elsewhere (a file, a pipe, CI) a line per event
reporter: Plain | live.Board = live.Board(console, progress, transfer) if sys.stdout.isatty() else Plain()


def findings(groups: list[dict[str, Any]]) -> None:
    """`orch check`: each finding once, errors first, with the points of the sweep it came from."""
    checked.show(console, groups)


def _finding_lines(items: list[dict[str, Any]]) -> None:
    for f in items:
        style = SEVERITY_STYLE.get(f["severity"], "")
        console.print(f"  [{style}]{line(f['severity'])}[/] {line(f['what'])}", soft_wrap=True)
        console.print(f"      [dim]why:[/] {line(f['why'])}", soft_wrap=True)
        console.print(f"      [dim]fix:[/] {line(f['fix'])}", soft_wrap=True)


def checkpoints_and_preflight(record: dict[str, Any]) -> None:
    """`orch show`: the checkpoints pushed for a run and its preflight findings."""
    if record.get("checkpoints"):
        table = Table(title="checkpoints", title_justify="left")
        for column in ("name", "dest", "source", "transforms", "result", "manifest", "moved"):
            table.add_column(column)
        for c in record["checkpoints"]:
            transforms = ", ".join(next(iter(t)) for t in c["transforms"]) or "-"
            moved = f"{c['sent_files']}/{c['files']} files, {c['sent_bytes'] / 2**20:.1f} MiB"
            table.add_row(line(c["name"]), line(c["dest"]), line(c["source_hash"][:12]), line(transforms),
                          line(c["result_hash"][:12]), line(c["manifest_hash"][:12]), moved)
        console.print(table)
    if record.get("preflight"):
        console.print(f"[bold]preflight[/] ({len(record['preflight'])} finding(s)):")
        _finding_lines(record["preflight"])


def imported(done: Any) -> None:
    """`orch import`: the run recorded and what its log says."""
    style = STATUS_STYLE.get(done.status, "")
    said = "  ".join(f"{m.label} {fmt(done.metrics.get(m.name))}" for m in done.shown)
    console.print(f"run {done.run_id} ({line(done.uid)}) imported ({line(done.engine)}): [{style}]{done.status}[/]  "
                  f"{line(said)}" + (f"  flags: {line(', '.join(done.flags))}" if done.flags else ""))
    if done.diagnosis:
        console.print(f"[red]diagnosis:[/] {line(done.diagnosis.summary)}", soft_wrap=True)
        for said_line in done.diagnosis.evidence:
            console.print(f"  [dim]|[/] {line(said_line)}", soft_wrap=True)
    if "draft-rejected" in done.flags:
        console.print("the target accepts almost no draft tokens; `orch check` on the experiment looks for why")
    if done.command:
        console.print(f"[bold]launch command[/] (from server_args): {line(done.command)}", soft_wrap=True)
    for warning in done.warnings:
        console.print(f"[yellow]warning:[/] {line(warning)}", soft_wrap=True)


def cleaned(host: str, verdicts: list[Any], dry_run: bool) -> None:
    """What `orch clean` removed from a host (or would), and why the rest stays."""
    gone = [v for v in verdicts if v.kept_because is None]
    kept: dict[str, int] = {}
    for v in verdicts:
        if v.kept_because is not None:
            kept[v.kept_because] = kept.get(v.kept_because, 0) + 1
    size = sum(v.folder.kib for v in gone) / 1024
    verb = "would remove" if dry_run else "removed"
    message = f"{verb} {len(gone)} run folder(s), {size:.1f} MiB" if gone else "no run folder to remove"
    if kept:
        message += "; kept " + ", ".join(f"{n}: {why}" for why, n in kept.items())
    progress(host, message)
    if dry_run:
        for v in gone:
            progress(host, f"  {v.folder.uid} (run {v.run.id}, {v.folder.kib / 1024:.1f} MiB)")
