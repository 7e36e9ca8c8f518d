"""An experiment's report: one self-contained HTML file (orchestrator/report), what `orch report` writes."""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from orchestrator.errors import SpecError

_DEFAULT_DB = "sqlite:///orch.db"


def write_report(experiment: str, out: str | PathLike[str] = "report.html", *, db: str = _DEFAULT_DB,
                 by: str = "") -> int:
    """`orch report EXPERIMENT -o OUT`: the HTML report of the experiment's runs written to `out`
    (configurations ranked by its objective, or by the metric `by` under its constraints, as
    `compare_configurations` ranks them); the number of runs it covers."""
    from orchestrator import report as reports  # plotly.js is read only here: `orch --help` stays fast
    from orchestrator.store import reading

    path = Path(out)
    if path.is_dir() or not path.parent.is_dir():
        raise SpecError(f"-o {out}: not a file in an existing folder; give a path such as report.html")
    return reports.write(reading.open_url(db), experiment, path, by.strip())
