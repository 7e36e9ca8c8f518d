"""Checks of an experiment's run plans before any host is touched: every `matrix` and `--set` key
is read by something, every `expect` key is a metric a run records, and the params orch itself
uses as numbers are numbers. Each problem is one SpecError naming file:line (or the `--set`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta, nodes

from . import objective as objectives, render, spec as specs, yamlfile
from orchestrator.errors import SpecError
from .spec import WORKLOAD_PREFIX, RunPlan, Spec

# Params orch reads itself, whatever the template does (scheduling, the port check). The preflight
# reads the rendered command, never a param: a param only it read would be a typo unnoticed.
ORCH_PARAMS = ("port", "tp_size")
# What a template sees besides the params (execute.run_context): never a param's name.
CONTEXT_NAMES = ("host", "run", "experiment", "variant", "params", "env", "checkpoints")
# The metrics a run records (collect.py: workload, decode-log means, start-up time): what `expect` may name.
METRICS = (
    "accept_len", "accept_rate", "gen_throughput", "decode_intervals", "requests", "completion_tokens",
    "workload_s", "output_tok_s", "startup_s", "request_throughput", "total_tok_s",
    *(f"{name}_p{p}" for name in ("ttft_ms", "itl_ms", "e2e_ms") for p in (50, 90, 99)),  # workload.latency_metrics
)
WHOLE_NUMBERS = {"port": (1, 65535), "tp_size": (1, None)}
# `params.items()` and the like read every param: `params.NAME` is a param only for other names
DICT_METHODS = {"items", "keys", "values", "get"}


def check_template_place(spec: Spec, inventory_folders: tuple[Path, ...] = ()) -> None:
    """Refuse a template outside the folders orch trusts (render.trusted_folders): the experiment's
    own and the inventory's `template_folders:` add to them."""
    folders = render.trusted_folders(spec.path, (*spec.template_folders, *inventory_folders))
    if not render.is_trusted(spec.template, folders):
        located = yamlfile.load(spec.path)
        raise render.untrusted_error(spec.template, folders, located.where("template" if "template" in located else None))


def check(spec: Spec, plans: list[RunPlan], overrides: list[str]) -> None:
    """Raise a SpecError for the first key nothing reads, unknown metric or non-number param."""
    located = yamlfile.load(spec.path)
    given, _ = specs.parse_overrides(overrides)
    used = read_params(spec, given)
    _check_params(spec, located, used)
    _check_matrix(spec, located, given, used)
    _check_set(spec, located, given, used)
    _check_expect(spec, located)
    _check_objective(spec, located)
    for plan in plans:
        for name, bounds in WHOLE_NUMBERS.items():
            if name in plan.params:
                _whole_number(plan.params[name], name, bounds, _param_where(located, plan, name, given))


def _check_objective(spec: Spec, located: yamlfile.Located) -> None:
    """The objective's metrics are ones a run records, as `expect` keys are (a tool names its own)."""
    if spec.objective is None or spec.workload.tool is not None:
        return
    body = located.get("objective")
    mapping = body if isinstance(body, yamlfile.Located) else yamlfile.Located()  # spec.load saw it is one
    objectives.check_metrics(spec.objective, METRICS, lambda key: mapping.where(key) if key in mapping else
                             located.where("objective"), "a metric a run records")


def _check_matrix(spec: Spec, located: yamlfile.Located, given: dict[str, Any], used: set[str] | None) -> None:
    for key in spec.matrix:
        if key in given:
            raise SpecError(f"--set {key}={_shown(given[key])}: overrides the matrix's `{key}` "
                            f"({_where(located, 'matrix', key)}), so every run of the matrix would be the same; drop one")
        if used is not None and key not in used and not key.startswith(WORKLOAD_PREFIX):
            raise SpecError(f"{_where(located, 'matrix', key)}: matrix key {key!r} {_unread(key, spec, used)}")


def _check_params(spec: Spec, located: yamlfile.Located, used: set[str] | None) -> None:
    """A `params:` key (the experiment's or a variant's) nothing reads is a typo or a leftover: the
    runs would not get it, so it is refused as a matrix key is."""
    if used is None:
        return
    written: list[tuple[tuple[str, ...], str]] = [(("params", key), key) for key in spec.params]
    written += [(("variants", v.name, "params", key), key) for v in spec.variants for key in v.params]
    for path, key in written:
        if key not in used:
            raise SpecError(f"{_where(located, *path)}: param {key!r} {_unread(key, spec, used)}")


def _check_set(spec: Spec, located: yamlfile.Located, given: dict[str, Any], used: set[str] | None) -> None:
    for key, value in given.items():
        if used is not None and key not in used and not key.startswith(WORKLOAD_PREFIX):
            raise SpecError(f"--set {key}={_shown(value)}: param {key!r} {_unread(key, spec, used)}")
        for path in (("params", key), *(("variants", v.name, "params", key) for v in spec.variants)):
            written = _value(located, path) if _has(located, path) else None
            if isinstance(written, (list, dict)):  # --set gives text: a list would be iterated letter by letter
                raise SpecError(f"--set {key}={_shown(value)}: the experiment's `{key}` is a "
                                f"{'list' if isinstance(written, list) else 'mapping'} ({_where(located, *path)}) "
                                "and --set gives one text value; change it in the experiment")


def _check_expect(spec: Spec, located: yamlfile.Located) -> None:
    if spec.workload.tool is not None:  # the engine's benchmark tool names the metrics, once it has run
        return
    for variant in spec.variants:
        for metric in variant.expect:
            if metric not in METRICS:
                close = yamlfile.did_you_mean(metric, METRICS)
                known = f"metrics: {', '.join(METRICS)}"
                hint = f"{close} ({known})" if close.startswith("did") else known
                raise SpecError(f"{_where(located, 'variants', variant.name, 'expect', metric)}: expect key "
                                f"{metric!r} of variant '{variant.name}' is not a metric a run records; {hint}")


def read_params(spec: Spec, given: dict[str, Any]) -> set[str] | None:
    """Every param name the template (and the templates it includes), the params' own `{{ }}`
    values (the experiment's, the matrix's, `given` by --set), the checkpoint destinations and orch
    read; None when the template reads params by a name only known when it renders (`params[name]`,
    `params.items()`): then any key may be used."""
    names: set[str] = set(ORCH_PARAMS) | set(spec.extra_params)
    folder = Path(os.path.realpath(spec.template)).parent  # where the renderer reads includes from
    env = render.environment(folder)
    values = [*spec.params.items(), *(item for v in spec.variants for item in v.params.items()),
              *((k, v) for k, vs in spec.matrix.items() for v in vs), *given.items()]
    sources = [(f"{spec.template}:{{line}}", _template_text(spec.template))]
    sources += [(f"{spec.path}: param {k}", v) for k, v in values if isinstance(v, str) and "{{" in v]
    sources += [(f"{c.where}: checkpoint dest", c.dest) for c in spec.checkpoints]
    seen: set[str] = set()
    while sources:
        where, text = sources.pop()
        tree = _parse(env, text, where)
        found = _names_read(tree, where, text)
        if found is None:
            return None
        names |= found
        for ref, line in render.referenced(tree):
            if ref is None:  # an include chosen when rendering: anything may be read
                return None
            try:
                included = render.included_path(folder, ref)
            except render.OutsideFolder as exc:
                raise exc.error(where.replace("{line}", str(line)) if "{line}" in where else where) from None
            if str(included) not in seen:
                seen.add(str(included))
                sources.append((f"{included}:{{line}}", _template_text(included)))
    return names


def _names_read(tree: nodes.Template, where: str, text: str) -> set[str] | None:
    """The names a parsed template reads: as variables, or as `params.NAME` / `params['NAME']` /
    `params.get('NAME')`; None when it reads `params` any other way."""
    try:
        names = set(meta.find_undeclared_variables(tree)) - set(CONTEXT_NAMES)
    except jinja2.TemplateAssertionError as exc:  # compiling for the names finds an unknown filter or test
        raise _syntax_error(exc, where, text) from None
    dynamic = False

    def visit(node: nodes.Node, parent: nodes.Node | None, grandparent: nodes.Node | None) -> None:
        nonlocal dynamic
        if isinstance(node, nodes.Name) and node.name == "params":
            if isinstance(parent, nodes.Getattr) and parent.attr not in DICT_METHODS:
                names.add(parent.attr)
            elif isinstance(parent, nodes.Getitem) and isinstance(parent.arg, nodes.Const):
                names.add(str(parent.arg.value))
            elif (isinstance(parent, nodes.Getattr) and parent.attr == "get" and isinstance(grandparent, nodes.Call)
                  and grandparent.args and isinstance(grandparent.args[0], nodes.Const)):
                names.add(str(grandparent.args[0].value))
            else:
                dynamic = True
        for child in node.iter_child_nodes():
            visit(child, node, parent)

    visit(tree, None, None)
    return None if dynamic else names


def _template_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the template ({exc}); fix `template:` or the file") from None


def _parse(env: jinja2.Environment, text: str, where: str) -> nodes.Template:
    """The template's tree; `where` names the file (with a `{line}` slot) or the value parsed."""
    try:
        return env.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise _syntax_error(exc, where, text) from None


def _syntax_error(exc: jinja2.TemplateSyntaxError, where: str, text: str) -> SpecError:
    place = where.replace("{line}", str(exc.lineno)) if "{line}" in where else f"{where} {text!r}"
    return SpecError(f"{place}: template syntax error: {exc.message}; fix the `{{{{ }}}}` text")


def _unread(key: str, spec: Spec, used: set[str]) -> str:
    """The rest of the message for a key nothing reads."""
    hint = yamlfile.did_you_mean(key, sorted(used))
    close = f"{hint} " if hint.startswith("did") else ""
    return (f"is read by nothing: neither the template {spec.template.name} nor orch uses it, so every run "
            f"would be the same; {close}fix the name, or list it under `extra_params:` if the template reads it "
            "indirectly")


def _whole_number(value: Any, name: str, bounds: tuple[int, int | None], where: str) -> None:
    low, high = bounds
    number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str) and value.isdigit():
        number = int(value)
    if number is None or number < low or (high is not None and number > high):
        wanted = f"{low}-{high}" if high is not None else f">= {low}"
        raise SpecError(f"{where}: `{name}` must be a whole number {wanted}, got {_shown(value)}")


def _param_where(located: yamlfile.Located, plan: RunPlan, name: str, given: dict[str, Any]) -> str:
    """Where a plan's param was set: the `--set`, the matrix, the variant or the experiment's params."""
    if name in given:
        return f"--set {name}={_shown(given[name])}"
    for path in (("matrix", name), ("variants", plan.variant, "params", name), ("params", name)):
        if _has(located, path):
            return _where(located, *path)
    return str(located.source)


def _has(data: Any, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


def _value(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _where(data: yamlfile.Located, *path: str) -> str:
    """file:line of the deepest key of `path` that is there."""
    for key in path[:-1]:
        child = data.get(key)
        if not isinstance(child, yamlfile.Located):
            return data.where(key)
        data = child
    return data.where(path[-1])


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)
