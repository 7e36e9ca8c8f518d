"""An engine's rehearsal stand-in as orch ships it: a base package tree under `<tree>/<package>/`
with one overlay per emulated release under `<tree>/releases/<release>/<package>/` (files there
replace or add to the base), plus files kept once elsewhere and copied into every assembled tree,
and the script that makes the demo checkpoints on the host. The trees are programs copied to
hosts, never imported by orch."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")


@dataclass(frozen=True)
class StandIn:
    sim_dir: Path  # the stand-in's tree: holds `<package>/` and `releases/`
    package: str  # the engine's Python package the tree stands in for
    default_release: str
    checkpoint_maker: Path  # a script run on the host: makes the demo checkpoints
    shared: Mapping[str, Path] = field(default_factory=dict)  # path in the tree -> the one copy

    def releases(self) -> tuple[str, ...]:
        """The emulated releases, oldest first."""
        names = [p.name for p in (self.sim_dir / "releases").iterdir() if (p / self.package).is_dir()]
        return tuple(sorted(names, key=lambda name: tuple(int(part) for part in name.split("."))))

    def layers(self, release: str) -> tuple[Path, Path]:
        """The base tree and the release's overlay, in the order they are laid down."""
        return self.sim_dir / self.package, self.sim_dir / "releases" / release / self.package

    def files(self, release: str) -> dict[str, Path]:
        """Every file of the assembled tree (path relative to the package folder) and where it comes from."""
        found: dict[str, Path] = {}
        for layer in self.layers(release):
            for path in sorted(layer.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    found[str(path.relative_to(layer))] = path
        return {**found, **self.shared}

    def assemble(self, release: str, dest: Path) -> Path:
        """Write the release's tree under `dest` (which must not hold one yet); returns it."""
        if release not in self.releases():
            raise ValueError(f"no {self.package} rehearsal release {release!r}; there are {', '.join(self.releases())}")
        target = dest / self.package
        for layer in self.layers(release):
            shutil.copytree(layer, target, dirs_exist_ok=True, ignore=SKIP)
        for at, source in self.shared.items():
            shutil.copyfile(source, target / at)
        return target
