"""Projects of the bad-input corpus (tests/bad_inputs/): the healthy base's files, changed as a
case says, with its placeholders filled in (see test_bad_inputs.py for a case's keys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import ROOT, free_port

CORPUS = Path(__file__).resolve().parent.parent / "bad_inputs"
BASE = CORPUS / "base"
TEMPLATE = ROOT / "templates" / "sglang_launch.sh.j2"


def apply(base: str, change: Any) -> str:
    """A file's text: the base, replaced (a text), edited and/or appended to (a mapping)."""
    if change is None:
        return base
    if isinstance(change, str):
        return change
    text = base
    for old, new in change.get("edit", []):
        assert old in text, f"{old!r} is not in the base file"
        text = text.replace(old, new, 1)
    return text + change.get("append", "")


def build(case: dict[str, Any], folder: Path, places: dict[str, str]) -> Path:
    """The case's project folder: the base files, changed as the case says."""
    project = folder / "project"
    project.mkdir()
    fill = lambda text: fill_in(text, {**places, "@PROJECT@": str(project)})
    (project / "templates").mkdir()
    (project / "templates" / "launch.sh.j2").write_text(TEMPLATE.read_text())
    (project / "exp.yaml").write_text(fill(apply((BASE / "experiment.yaml").read_text(), case.get("experiment"))))
    (project / "inventory.yaml").write_text(fill(apply((BASE / "inventory.yaml").read_text(), case.get("inventory"))))
    for name in case.get("remove", []):
        (project / name).unlink()
    for name in case.get("folders", []):
        (project / name).mkdir(parents=True, exist_ok=True)
    for name, text in case.get("files", {}).items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(fill(text))
    for name, text in case.get("bytes", {}).items():
        (project / name).write_bytes(fill(text).encode("latin-1"))
    for name, size in case.get("sparse", {}).items():
        with open(project / name, "wb") as f:
            f.truncate(size)
    return project


def fill_in(text: str, places: dict[str, str]) -> str:
    text = text.replace("@FREE_PORT@", str(free_port()))
    for name, value in places.items():
        text = text.replace(name, value)
    return text
