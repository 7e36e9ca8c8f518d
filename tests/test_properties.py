"""Properties of the experiment and inventory loaders: whatever the file holds (any text, any bytes,
any YAML structure with the real keys at any depth and values of any type), loading it gives a spec
or an inventory, or an OrchError (the one clear line) — never another exception. A spec that loads
goes on through `expand` and the checks made before any host is touched, under the same promise.

`make test` runs a couple of hundred examples of each; `pytest -m slow` runs thousands. No example
database is kept (a failure prints its example; nothing is written to the work tree)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import ROOT
from orchestrator.core import inventory as inventories, plancheck, spec as specs
from orchestrator.errors import OrchError

BASE = Path(__file__).parent / "bad_inputs" / "base"
TEMPLATE = ROOT / "templates" / "sglang_launch.sh.j2"
QUICK = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
THOROUGH = settings(max_examples=4000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

VARIANT_KEYS = ["description", "params", "env", "patches", "expect", "preflight"]
PATCH_KEYS = ["file", "find", "count", "diff", "replace", "insert_after", "insert_before"]
WORKLOAD_KEYS = ["requests", "max_new_tokens", "concurrency", "temperature", "prompts"]
CHECKPOINT_KEYS = ["name", "src", "dest", "transform"]
PARAM_KEYS = [*plancheck.ORCH_PARAMS, "mem_fraction_static", "disable_cuda_graph", "extra_args"]
KEYS = sorted({*specs.TOP_KEYS, *VARIANT_KEYS, *PATCH_KEYS, *WORKLOAD_KEYS, *CHECKPOINT_KEYS, *PARAM_KEYS,
               *inventories.HOST_KEYS, "hosts", "allow", "local", "base", "rename_keys", "d2t_to_offsets",
               *plancheck.METRICS})

# Text a person or a broken tool might write: YAML's own punctuation, paths, Jinja, shell, odd Unicode.
PIECES = st.sampled_from(["{{ host.workdir }}", "{{", "}}", "{%", "${HOME}", "$${X}", "~", "/", "../", "sglang:",
                          "srt/models/llama_eagle3.py", "\x00", "\t", "\n", "\r", " ", "#", ":", "- ", "*a", "&a",
                          "!!str", "!!python/object:os.system", ">= 2.0", "0x10", "1e400", "nan", "ü", "\udcff",
                          "\ufeff", "a" * 300, "templates/launch.sh.j2", "[", "]", "'", '"', "-1", "0", "65536"])
TEXT = st.one_of(st.text(max_size=30), st.lists(PIECES, max_size=6).map("".join))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), TEXT, st.sampled_from(KEYS))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.sampled_from(KEYS), TEXT, st.integers()), inner, max_size=5)),
    max_leaves=25,
)


def mapping_of(keys: list[str], values: st.SearchStrategy = VALUES) -> st.SearchStrategy[dict]:
    """Mappings with some of `keys` (each with any value) and maybe a stray key."""
    return st.fixed_dictionaries({}, optional={**{k: values for k in keys}, "zz_stray": values})


NAMES = st.one_of(st.sampled_from(["base", "story", "fixed", "local", "box"]), TEXT)
EXPERIMENTS = st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.just("corpus"), VALUES),
    "hosts": st.one_of(st.just(["local"]), VALUES),
    "template": st.one_of(st.just("templates/launch.sh.j2"), VALUES),
    "params": st.one_of(mapping_of(PARAM_KEYS), VALUES),
    "env": st.one_of(st.dictionaries(TEXT, VALUES, max_size=3), VALUES),
    "patches": st.one_of(st.dictionaries(NAMES, mapping_of(PATCH_KEYS), max_size=3), VALUES),
    "variants": st.one_of(st.dictionaries(NAMES, mapping_of(VARIANT_KEYS), max_size=3), VALUES),
    "matrix": st.one_of(st.dictionaries(st.sampled_from(PARAM_KEYS) | TEXT, VALUES, max_size=3), VALUES),
    "repeats": VALUES, "ready_timeout": VALUES, "debug_pattern": VALUES, "extra_params": VALUES,
    "workload": st.one_of(mapping_of(WORKLOAD_KEYS), VALUES),
    "checkpoints": st.one_of(st.lists(mapping_of(CHECKPOINT_KEYS), max_size=3), VALUES),
    "preflight": st.one_of(st.fixed_dictionaries({"allow": VALUES}), VALUES),
    "zz_stray": VALUES,
})
INVENTORIES = st.fixed_dictionaries({}, optional={
    "hosts": st.one_of(st.dictionaries(NAMES, mapping_of(sorted(inventories.HOST_KEYS)), max_size=3), VALUES),
    "zz_stray": VALUES,
})
OVERRIDES = st.lists(st.one_of(TEXT, st.builds(lambda k, v: f"{k}={v}", st.sampled_from(PARAM_KEYS) | TEXT, TEXT)),
                     max_size=3)


def mutated(text: str) -> st.SearchStrategy[str]:
    """`text` with lines dropped, repeated or cut, and pieces put in at random places."""
    lines = text.splitlines(keepends=True)

    def edit(ops: list[tuple[int, int, str]]) -> str:
        out = list(lines)
        for kind, at, piece in ops:
            at %= max(len(out), 1)
            if not out:
                out.append(piece)
            elif kind == 0:
                del out[at]
            elif kind == 1:
                out.insert(at, out[at])
            elif kind == 2:
                out[at] = out[at][: len(out[at]) // 2]
            else:
                cut = len(out[at]) // 2
                out[at] = out[at][:cut] + piece + out[at][cut:]
        return "".join(out)

    return st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**6), PIECES), max_size=6).map(edit)


class Folder:
    """One experiment folder reused by every example: the template, a checkpoint folder, a diff."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="orch-properties-"))
        atexit.register(shutil.rmtree, self.root, ignore_errors=True)
        (self.root / "templates").mkdir()
        (self.root / "templates" / "launch.sh.j2").write_text(TEMPLATE.read_text())
        (self.root / "drafts" / "d").mkdir(parents=True)
        (self.root / "fix.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")

    def write(self, name: str, data: bytes) -> Path:
        path = self.root / name
        path.write_bytes(data)
        return path


FOLDER = Folder()


def load_experiment(data: bytes, overrides: list[str] = ()) -> None:
    """Load, expand and check before any host: a spec, or an OrchError."""
    try:
        spec = specs.load(FOLDER.write("exp.yaml", data))
        plans = specs.expand(spec, list(overrides))
        plancheck.check(spec, plans, list(overrides))
    except OrchError as exc:
        assert str(exc) and "\n" not in str(exc), repr(str(exc))


def load_inventory(data: bytes) -> None:
    try:
        inv = inventories.load(FOLDER.write("inventory.yaml", data))
        inv.select(list(inv.hosts)[:1] or ["local"])
        for host in inv.hosts.values():
            host.context()
    except OrchError as exc:
        assert str(exc) and "\n" not in str(exc), repr(str(exc))


def dumped(value: Any) -> bytes:
    return yaml.safe_dump(value, allow_unicode=True).encode("utf-8", "surrogateescape")


def experiment_structures(value: dict, overrides: list[str]) -> None:
    load_experiment(dumped(value), overrides)


def experiment_mutations(text: str) -> None:
    load_experiment(text.encode("utf-8", "surrogateescape"))


def inventory_structures(value: dict) -> None:
    load_inventory(dumped(value))


def inventory_mutations(text: str) -> None:
    load_inventory(text.encode("utf-8", "surrogateescape"))


def any_bytes(data: bytes) -> None:
    load_experiment(data)
    load_inventory(data)


BASE_EXPERIMENT = (BASE / "experiment.yaml").read_text().replace("@FREE_PORT@", "30000")
BASE_INVENTORY = (BASE / "inventory.yaml").read_text().replace("@WORKDIR@", str(FOLDER.root / "host"))
PROPERTIES = [
    (experiment_structures, (EXPERIMENTS, OVERRIDES)),
    (experiment_mutations, (mutated(BASE_EXPERIMENT),)),
    (inventory_structures, (INVENTORIES,)),
    (inventory_mutations, (mutated(BASE_INVENTORY),)),
    (any_bytes, (st.binary(max_size=200),)),
]


# the quick pass over experiment structures is the slowest: kept out of `make test` (`pytest -m slow`
# runs it), the other structures and the mutations of the same experiment stay
QUICK_CASES = [pytest.param(p, strategies, id=p.__name__, marks=pytest.mark.slow if p is experiment_structures else ())
               for p, strategies in PROPERTIES]


@pytest.mark.parametrize("prop, strategies", QUICK_CASES)
def test_loaders_give_a_result_or_an_orch_error(prop, strategies) -> None:
    QUICK(given(*strategies)(prop))()


@pytest.mark.slow
@pytest.mark.parametrize("prop, strategies", PROPERTIES, ids=[p.__name__ for p, _ in PROPERTIES])
def test_loaders_give_a_result_or_an_orch_error_thoroughly(prop, strategies) -> None:
    THOROUGH(given(*strategies)(prop))()


def test_the_base_files_load_so_the_mutations_start_from_healthy_input() -> None:
    spec = specs.load(FOLDER.write("exp.yaml", BASE_EXPERIMENT.encode()))
    plancheck.check(spec, specs.expand(spec), [])
    assert list(inventories.load(FOLDER.write("inventory.yaml", BASE_INVENTORY.encode())).hosts) == ["local"]
