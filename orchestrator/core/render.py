"""Launch scripts from Jinja templates: strict about undefined values, every value shell-quoted.

Both the template and `{{ ... }}` inside param values render in Jinja's immutable sandbox: a value
from `--set` or another user's experiment is data, so `{{ cycler.__init__.__globals__ ... }}` must
reach nothing of the controller's Python."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from . import secrets, shell
from orchestrator.errors import SpecError


def environment(search: Path) -> jinja2.Environment:
    """The sandboxed environment templates render (and are parsed) in, with the `q` and `qpath` filters."""
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.FileSystemLoader(str(search)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = shell.quote
    env.filters["qpath"] = shell.path
    return env


def render_file(template: Path, context: dict[str, Any]) -> str:
    """Render a template file; errors name template:line and the missing value."""
    env = environment(template.parent)
    try:
        return env.get_template(template.name).render(context)
    except jinja2.TemplateSyntaxError as exc:
        raise SpecError(f"{template}:{exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        line = _template_line(exc, template)
        raise SpecError(
            f"{template}:{line}: {exc.message}; set it in the experiment's params or with --set NAME=VALUE"
        ) from None
    except SecurityError as exc:
        raise SpecError(f"{template}:{_template_line(exc, template)}: refused by the template sandbox: {exc}") from None


def launch_script(template: Path, context: dict[str, Any]) -> str:
    """The run's launch script: its env holds no secret (the launch reads those from a 0600 file)."""
    return render_file(template, {**context, "env": secrets.public_env(context["env"], context.get("secret_names", ()))})


def render_value(value: Any, context: dict[str, Any], where: str) -> Any:
    """Render a param that itself holds `{{ ... }}` (e.g. a path under the host's workdir)."""
    if not isinstance(value, str) or "{{" not in value:
        return value
    env = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
    try:
        return env.from_string(value).render(context)
    except SecurityError as exc:
        raise SpecError(f"{where}: {value!r} was refused by the template sandbox ({exc}); "
                        "a value may read names (host.*, params.*) but not reach Python objects") from None
    except (jinja2.TemplateError, TypeError) as exc:
        raise SpecError(f"{where}: cannot render {value!r}: {exc}") from None


def _template_line(exc: BaseException, template: Path) -> int | str:
    for frame, lineno in reversed(list(traceback.walk_tb(exc.__traceback__))):
        if frame.f_code.co_filename == str(template) or frame.f_code.co_filename.endswith(template.name):
            return lineno
    return "?"
