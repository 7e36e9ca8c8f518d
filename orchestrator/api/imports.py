"""What `orch import` files an imported run under, and when it ran: the experiment and variant it
is given (names checked as an experiment file's are), and the first and last timestamps of its log."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.run.logimport import LogSource

DEFAULT_VARIANT = "imported"  # an imported run's variant in an experiment of its own runs, unless named


def check_names(experiment: str | None, variant: str | None) -> None:
    """A SpecError for an experiment or variant that is no name, as an experiment file's would get."""
    from orchestrator.core import names

    if experiment is not None:
        names.identifier(experiment, "--experiment", "experiment name",
                         "give the experiment's name as `orch ls` shows it, e.g. --experiment steps")
    if variant is not None:
        names.identifier(variant, "--variant", "variant name", "e.g. --variant by-hand")


def filed(source: LogSource, experiment: str | None, variant: str | None) -> tuple[LogSource, str | None]:
    """The source with its experiment (its name checked already: `check_names`) and its log's
    times set, and the variant to record (None: the log's file name, as a run outside any
    experiment is named)."""
    if experiment is not None:
        source = replace(source, experiment=experiment)
        variant = variant or DEFAULT_VARIANT
    return replace(source, span=log_span(source)), variant


def log_span(source: LogSource) -> tuple[str, str] | None:
    """The log's first and last timestamps, in any known engine's style; a stamp without a year
    takes the year of the file's last write (a log read from a host: of now)."""
    from orchestrator import engines
    from orchestrator.engines import logspan

    stamps = [s for s in (engines.get(name).log_stamp for name in engines.KNOWN) if s]
    written = datetime.now(UTC)
    if source.path is None:
        head, tail = source.data[:logspan.HEAD], source.data[-logspan.HEAD:]
    else:
        try:
            with open(source.path, "rb") as log:
                head = log.read(logspan.HEAD)
                size = log.seek(0, 2)
                log.seek(max(0, size - logspan.HEAD))
                tail = log.read()
        except OSError:
            return None  # the import itself says what is wrong with the file
    if source.host is None:
        try:
            written = datetime.fromtimestamp((source.path or Path(source.where)).stat().st_mtime, UTC)
        except OSError:
            pass
    return logspan.span(head, tail, stamps, written)

