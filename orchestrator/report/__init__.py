"""`orch report`: one self-contained HTML file about an experiment's runs.

data (the runs as plain records and `orch compare`'s comparison of them), figures (Plotly figure
specs as plain JSON), page (the HTML, every database value escaped, plotly.js inlined).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.store.reading import Reader

__all__ = ["write"]


def write(store: Reader, experiment: str, out: Path, by: str = "") -> int:
    """Write the report of `experiment` from `store` to `out`, configurations ranked by the
    experiment's objective (`by`: another metric under its constraints); the number of runs it covers."""
    from . import data, page

    found = data.load(store, experiment, by)
    out.write_text(page.render(found), encoding="utf-8")
    return len(found.runs)
