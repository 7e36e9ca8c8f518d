"""The README and docs/: the README stays a short front page; the reference in docs/ names every
command, exit code, experiment and inventory key and preflight code orch has, and every link in them
leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator import engines, errors
from orchestrator.cli import app, hosts_app
from orchestrator.core import inventory, spec

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def text(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    plain = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, fence = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            found.add(slug(line.lstrip("#")))
    return found


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move reference text to docs/"
    for page in DOCS:
        assert f"docs/{page.name}" in README.read_text(), f"README.md does not link {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_leads_somewhere(page: Path):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # an address outside the repository
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def command_names() -> list[str]:
    top = [c.name or c.callback.__name__ for c in app.registered_commands]
    groups = [g.name for g in app.registered_groups]
    nested = [f"hosts {c.name or c.callback.__name__}" for c in hosts_app.registered_commands]
    return [*top, *groups, *nested]


def test_every_command_has_its_section():
    commands = text("commands.md")
    headings = {line.lstrip("#").strip() for line in commands.splitlines() if line.startswith("#")}
    missing = [name for name in command_names() if f"orch {name}" not in headings]
    assert not missing, f"docs/commands.md has no `## orch NAME` section for: {missing}"


def test_every_exit_code_is_documented():
    commands = text("commands.md")
    section = commands[commands.index("## Exit codes"):].split("\n## ", 1)[0]
    codes = {value for name, value in vars(errors).items() if name.startswith("EXIT_") and isinstance(value, int)}
    missing = [code for code in sorted(codes) if not re.search(rf"^- {code}: ", section, re.M)]
    assert not missing, f"docs/commands.md's exit codes lack: {missing}"


def test_every_experiment_key_is_documented():
    experiments = text("experiments.md")
    keys = spec.TOP_KEYS | spec.WORKLOAD_KEYS
    missing = sorted(key for key in keys if f"`{key}`" not in experiments)
    assert not missing, f"docs/experiments.md does not name: {missing}"


def test_every_inventory_key_is_documented():
    reference = text("inventory.md") + text("slurm.md")
    missing = sorted(key for key in inventory.HOST_KEYS | inventory.SLURM_KEYS if f"`{key}`" not in reference)
    assert not missing, f"docs/inventory.md does not name: {missing}"


@pytest.mark.parametrize("engine", sorted(engines.KNOWN))
def test_every_preflight_code_is_documented(engine: str):
    preflight = text("preflight.md")
    missing = [code for code in engines.preflight_codes(engine) if f"`{code}`" not in preflight]
    assert not missing, f"docs/preflight.md does not name {engine}'s codes: {missing}"
