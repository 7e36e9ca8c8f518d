"""All printing: progress lines, tables, run details, diffs, errors."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .diff import Row
from .store import Run

# Tables keep their shape when output goes to a file or a pipe (rich assumes 80 columns there).
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(highlight=False, width=_WIDTH)
errors = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)
STATUS_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1:
            return str(int(value))
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"
    return str(value)


def progress(label: str, message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    first, *rest = message.splitlines() or [""]
    console.print(f"[dim]{stamp}[/] [bold]{escape(label)}[/] {escape(first)}")
    for line in rest:
        console.print(f"         {escape(line)}", soft_wrap=True)


def error(message: str, evidence: tuple[str, ...] = ()) -> None:
    errors.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
    for line in evidence:
        errors.print(f"  [dim]|[/] {escape(line)}", soft_wrap=True)


def summary(outcomes: list[Any]) -> None:
    table = Table(title="runs", title_justify="left")
    for column in ("run", "variant", "host", "status", "accept len", "tok/s", "flags / error"):
        table.add_column(column)
    for o in outcomes:
        note = ", ".join(o.flags) if o.flags else ""
        if o.error:
            note = (note + "; " if note else "") + o.error
        table.add_row(
            fmt(o.run_id), o.variant, o.host, f"[{STATUS_STYLE.get(o.status, '')}]{o.status}[/]",
            fmt(o.metrics.get("accept_len")), fmt(o.metrics.get("output_tok_s")), escape(note),
        )
    console.print(table)


def runs(rows: list[Run]) -> None:
    table = Table()
    for column in ("id", "experiment", "variant", "host", "status", "started", "flags"):
        table.add_column(column)
    for r in rows:
        table.add_row(str(r.id), r.experiment, r.variant, r.host, f"[{STATUS_STYLE.get(r.status, '')}]{r.status}[/]",
                      r.started_at[:19].replace("T", " "), ", ".join(r.flags or []))
    console.print(table)


def show(record: dict[str, Any]) -> None:
    c = console
    c.print(f"[bold]run {record['id']}[/] {record['uid']}  {record['experiment']}/{record['variant']} on {record['host']}  "
            f"[{STATUS_STYLE.get(record['status'], '')}]{record['status']}[/]")
    c.print(f"started {record['started_at']}  ended {record['ended_at'] or '-'}")
    if record["flags"]:
        c.print(f"[yellow]flags:[/] {', '.join(record['flags'])}")
    if record["error"]:
        c.print(f"[red]error:[/] {escape(record['error'])}", soft_wrap=True)
    if record.get("diagnosis"):
        c.print(f"[red]diagnosis:[/] {escape(record['diagnosis']['summary'])}", soft_wrap=True)
        for line in record["diagnosis"]["evidence"]:
            c.print(f"  [dim]|[/] {escape(line)}", soft_wrap=True)
    _pairs("params", record["params"])
    _pairs("env", record["env"])
    table = Table(title="metrics", title_justify="left")
    for column in ("metric", "value", "source", "note"):
        table.add_column(column)
    for name, sources in record["metric_sources"].items():
        for s in sources:
            table.add_row(name, fmt(s["value"]), s["source"], escape(s["note"]))
    c.print(table)
    if record["patches"]:
        table = Table(title="patches", title_justify="left")
        for column in ("name", "file", "sha256 before", "sha256 after", "state"):
            table.add_column(column)
        for p in record["patches"]:
            table.add_row(p["name"], p["file"], p["sha256_before"][:12], p["sha256_after"][:12], p["state"])
        c.print(table)
    if record["debug_lines"]:
        c.print(f"[bold]debug lines[/] ({len(record['debug_lines'])}):")
        for d in record["debug_lines"][:10]:
            c.print(f"  {escape(d['text'])}", soft_wrap=True)
        if len(record["debug_lines"]) > 10:
            c.print(f"  ... {len(record['debug_lines']) - 10} more (`orch logs {record['id']} --debug`)")


def _pairs(title: str, values: dict[str, Any]) -> None:
    if values:
        console.print(f"[bold]{title}:[/] " + "  ".join(f"{k}={escape(fmt(v))}" for k, v in values.items()), soft_wrap=True)


def diff(a: dict[str, Any], b: dict[str, Any], rows: list[Row], command: list[str]) -> None:
    console.print(f"[bold]a[/] = run {a['id']} {a['experiment']}/{a['variant']} on {a['host']} ({a['status']})")
    console.print(f"[bold]b[/] = run {b['id']} {b['experiment']}/{b['variant']} on {b['host']} ({b['status']})")
    table = Table()
    for column in ("section", "key", "a", "b", "delta"):
        table.add_column(column)
    last = None
    for r in rows:
        table.add_row(r.section if r.section != last else "", escape(r.key), escape(fmt(r.a)), escape(fmt(r.b)),
                      _delta(r))
        last = r.section
    console.print(table)
    if command:
        console.print("[bold]launch script[/]:")
        for line in command:
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
            console.print(f"  [{style}]{escape(line)}[/]", soft_wrap=True)


def _delta(row: Row) -> str:
    if row.delta is None:
        return ""
    whole = all(isinstance(v, (int, float)) and float(v).is_integer() for v in (row.a, row.b))
    return f"{row.delta:+.0f}" if whole else f"{row.delta:+.3f}"


def raw(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def host_facts(facts: list[Any]) -> None:
    """`orch hosts check`: one row per host; unreachable hosts show why."""
    table = Table()
    for column in ("host", "rtt ms", "os", "python", "sglang", "gpus", "disk free", "port"):
        table.add_column(column)
    for f in facts:
        if not f.reachable:
            table.add_row(f.host, "[red]unreachable[/]", "", "", "", "", "", "")
            continue
        sglang = f"{f.sglang_version or '?'} {f.sglang_dir}" if f.sglang_dir else "-"
        gpus = f"{len(f.gpus)}x {f.gpus[0].name}" if f.gpus else "-"
        if f.gpu_processes:
            gpus += f" ({len(f.gpu_processes)} procs)"
        disk = "-" if f.disk_free_bytes is None else f"{f.disk_free_bytes / 2**30:.1f} GiB"
        port = f"{f.port} [red]in use[/]" if f.port_listening else f"{f.port} free"
        python = escape(f.python or f"[red]{f.python_error}[/]")
        table.add_row(f.host, fmt(f.rtt_ms), escape(f.os or "-"), python, escape(sglang), escape(gpus), disk, port)
    console.print(table)
    for f in facts:
        if not f.reachable:  # below the table: the reasons are long and name what to do
            console.print(f"[red]unreachable:[/] {escape(f.error or f.host)}", soft_wrap=True)
