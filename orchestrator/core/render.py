"""Launch scripts from Jinja templates: strict about undefined values, every value shell-quoted.

Both the template and `{{ ... }}` inside param values render in Jinja's immutable sandbox: a value
from `--set` or another user's experiment is data, so `{{ cycler.__init__.__globals__ ... }}` must
reach nothing of the controller's Python. The sandbox guards attributes, not effort: `{{ 10 ** 10 **
10 }}` or two nested loops of 100000 would hold orch for hours, so rendering runs in a forked child
bounded in time, memory and output, and every way it fails is one line naming template:line.

A template comes from a folder orch trusts: the experiment's folder, the `templates/` beside it (where
the default template is), orch's own templates/, or a folder the experiment or the inventory names
under `template_folders:`; `{% include %}` and `{% import %}` read only under the template's own
folder, symlinks resolved."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
import traceback
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Sequence

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from . import secrets, shell
from orchestrator.errors import SpecError

SHIPPED_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
FOLDERS_KEY = "template_folders"  # the experiment's and the inventory's key naming more trusted folders
RENDER_SECONDS = 10.0  # a launch template renders in milliseconds
RENDER_OUTPUT = 1 << 20  # characters: a launch script is a page; more is a runaway loop
RENDER_MEMORY = 1 << 30  # bytes the rendering child may take beyond what orch already holds


class OutsideFolder(Exception):
    """An include or import that resolves outside the template's folder."""

    def __init__(self, name: str, folder: Path):
        super().__init__(name)
        self.name, self.folder = name, folder

    def error(self, where: str) -> SpecError:
        return SpecError(f"{where}: {self.name!r} is outside the template's folder {self.folder} (symlinks "
                         "resolved); a template includes and imports only files under its own folder")


class _TooMuchOutput(Exception):
    pass


class _FolderLoader(jinja2.BaseLoader):
    """Templates from one folder (and its subfolders) only: a name with `..`, an absolute name or a
    symlink that resolves outside it is refused, not followed."""

    def __init__(self, folder: Path):
        self.folder = Path(os.path.realpath(folder))

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        path = included_path(self.folder, template)
        try:
            text = path.read_text(encoding="utf-8")
            mtime = path.stat().st_mtime
        except (OSError, UnicodeDecodeError):
            raise jinja2.TemplateNotFound(template) from None
        return text, str(path), lambda: path.stat().st_mtime == mtime


def included_path(folder: Path, name: str) -> Path:
    """The file `{% include name %}` reads, resolved; OutsideFolder when it is not under `folder`."""
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(os.path.join(real_folder, name))
    if os.path.isabs(name) or os.path.commonpath([real_folder, real]) != real_folder:
        raise OutsideFolder(name, Path(real_folder))
    return Path(real)


def environment(search: Path) -> jinja2.Environment:
    """The sandboxed environment templates render (and are parsed) in, with the `q` and `qpath` filters."""
    env = ImmutableSandboxedEnvironment(
        loader=_FolderLoader(search),
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
    """Render a template file, bounded; errors name template:line and what to do."""
    return _bounded(lambda: _render_file(template, context), str(template))


def launch_script(template: Path, context: dict[str, Any]) -> str:
    """The run's launch script: its env holds no secret (the launch reads those from a 0600 file)."""
    return render_file(template, {**context, "env": secrets.public_env(context["env"], context.get("secret_names", ()))})


def render_value(value: Any, context: dict[str, Any], where: str) -> Any:
    """Render a param that itself holds `{{ ... }}` (e.g. a path under the host's workdir)."""
    if not isinstance(value, str) or "{{" not in value:
        return value
    env = ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
    try:
        plain = _only_lookups(env.parse(value))
    except jinja2.TemplateSyntaxError as exc:
        raise SpecError(f"{where}: cannot render {value!r}: {exc}") from None
    if plain:  # names and lookups only: as big as the values it reads, so no child is needed
        return _render_value(env, value, context, where)
    return _bounded(lambda: _render_value(env, value, context, where), where)


def _render_file(template: Path, context: dict[str, Any]) -> str:
    env = environment(Path(os.path.realpath(template)).parent)
    try:
        return _joined(env.get_template(Path(os.path.realpath(template)).name).generate(context))
    except jinja2.TemplateSyntaxError as exc:
        raise SpecError(f"{template}:{exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        raise SpecError(f"{_at(exc, template)}: {exc.message}; set it in the experiment's "
                        "params or with --set NAME=VALUE") from None
    except SecurityError as exc:
        raise SpecError(f"{_at(exc, template)}: refused by the template sandbox: {exc}") from None
    except OutsideFolder as exc:
        raise exc.error(_at(exc, template)) from None
    except jinja2.TemplateNotFound as exc:
        raise SpecError(f"{_at(exc, template)}: template {exc.name!r} not found in "
                        f"{Path(os.path.realpath(template)).parent}; fix the include or import") from None
    except Exception as exc:
        raise SpecError(f"{_at(exc, template)}: cannot render: {_why(exc)}") from None


def _render_value(env: jinja2.Environment, value: str, context: dict[str, Any], where: str) -> str:
    try:
        return _joined(env.from_string(value).generate(context))
    except SecurityError as exc:
        raise SpecError(f"{where}: {value!r} was refused by the template sandbox ({exc}); "
                        "a value may read names (host.*, params.*) but not reach Python objects") from None
    except Exception as exc:
        raise SpecError(f"{where}: cannot render {value[:200]!r}: {_why(exc)}") from None


def _joined(chunks: Iterable[str]) -> str:
    """The rendered text, stopped as soon as it passes RENDER_OUTPUT characters."""
    parts, size = [], 0
    for chunk in chunks:
        size += len(chunk)
        if size > RENDER_OUTPUT:
            raise _TooMuchOutput()
        parts.append(chunk)
    return "".join(parts)


def _why(exc: BaseException) -> str:
    """An exception of rendering as the rest of one line, with what to do."""
    if isinstance(exc, _TooMuchOutput):
        return f"the output passes {RENDER_OUTPUT >> 20} MiB (a loop that runs away?); make the template write less"
    if isinstance(exc, MemoryError):
        return (f"it needs more than {RENDER_MEMORY >> 20} MiB of memory (a value multiplied too far?); "
                "make the values smaller")
    if isinstance(exc, RecursionError):
        return "it recurses too deep (a macro calling itself?); fix the template"
    text = " ".join(str(exc).split())[:200]
    return f"{type(exc).__name__}: {text}; fix the template or the value"


def _only_lookups(tree: nodes.Template) -> bool:
    """The value reads names, attributes and constant keys, and writes text: nothing that computes."""
    allowed = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.Name, nodes.Getattr, nodes.Const)
    for node in tree.find_all(nodes.Node):
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            continue
        if not isinstance(node, allowed):
            return False
    return True


def _bounded(work: Callable[[], str], what: str) -> str:
    """`work()` in a forked child: its text, or its SpecError again here. The child gets RENDER_MEMORY
    more memory than this process holds and RENDER_SECONDS; its output is read up to the bound."""
    if not hasattr(os, "fork"):
        return work()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child(work, what, read_end, write_end)
    os.close(write_end)
    finished = False
    try:
        data, finished = _read_until(read_end, time.monotonic() + RENDER_SECONDS, limit=4 * RENDER_OUTPUT + 4096)
    finally:  # a child that has not answered (or Ctrl-C here) is killed; one that has is exiting
        os.close(read_end)
        if not finished:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if not finished:
        raise SpecError(f"{what}: rendering took more than {RENDER_SECONDS:g} s (a loop or a number too big?); "
                        "make the template do less")
    try:
        result = json.loads(data)
    except ValueError:  # the child died before it could answer (killed for memory, by the kernel)
        raise SpecError(f"{what}: rendering stopped without an answer (out of memory?); "
                        "make the template or its values smaller") from None
    if "error" in result:
        raise SpecError(result["error"])
    return str(result["text"])


def _child(work: Callable[[], str], what: str, read_end: int, write_end: int) -> None:
    """The rendering child: renders, writes one JSON answer, and exits without running any of the
    parent's cleanups (no atexit, no flushing of buffers it inherited)."""
    try:
        os.close(read_end)
        _quiet_signals()
        _limit_memory()
        try:
            answer = {"text": work()}
        except SpecError as exc:
            answer = {"error": str(exc)}
        except BaseException as exc:  # what `work` did not place: still one line
            answer = {"error": f"{what}: cannot render: {_why(exc)}"}
        data = json.dumps(answer).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view):]
    finally:
        os._exit(0)


def _quiet_signals() -> None:
    """Ctrl-C is the parent's to handle (it kills this child); the parent's event loop wake-up fd is
    not this child's to write to."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # forked from a thread other than the main one: no wake-up fd was set here
        pass


def _limit_memory() -> None:
    try:
        with open("/proc/self/statm") as f:
            held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux: the time bound still holds
        return
    resource.setrlimit(resource.RLIMIT_AS, (held + RENDER_MEMORY, resource.getrlimit(resource.RLIMIT_AS)[1]))


def _read_until(fd: int, deadline: float, limit: int) -> tuple[bytes, bool]:
    """What the child writes until it closes the pipe: (data, True); (data, False) at the deadline or
    past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or size > limit:
            return b"".join(chunks), False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)


def is_trusted(template: Path, folders: Sequence[Path]) -> bool:
    """The template, symlinks resolved, lies under one of `folders` (trusted_folders)."""
    real = os.path.realpath(template)
    return any(os.path.commonpath([os.path.realpath(f), real]) == os.path.realpath(f) for f in folders)


def untrusted_error(template: Path, folders: Sequence[Path], where: str) -> SpecError:
    real = os.path.realpath(template)
    link = f" (a link to {real})" if real != os.path.abspath(template) else ""
    return SpecError(f"{where}: template {template}{link} is outside the folders templates come from "
                     f"({', '.join(str(f) for f in folders)}); move it into one, or name its folder under "
                     f"`{FOLDERS_KEY}:` in the experiment or the inventory")


def trusted_folders(experiment: Path, named: Iterable[Path] = ()) -> list[Path]:
    """The folders a template may come from: the experiment's own, the templates/ beside it (the
    default template's), orch's shipped templates/, and the folders named under `template_folders:`."""
    folder = Path(os.path.abspath(experiment)).parent
    found = [folder, folder.parent / "templates", SHIPPED_TEMPLATES, *named]
    return list(dict.fromkeys(Path(os.path.normpath(f)) for f in found))


def named_folders(value: object, base: Path, where: str) -> tuple[Path, ...]:
    """`template_folders: [path, ...]`: existing folders, relative to the file's own folder."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise SpecError(f"{where}: `{FOLDERS_KEY}` must be a list of folder paths, e.g. "
                        f"{FOLDERS_KEY}: [/shared/templates]")
    folders = []
    for text in value:
        folder = Path(os.path.normpath(base / os.path.expanduser(text)))
        if not folder.is_dir():
            raise SpecError(f"{where}: `{FOLDERS_KEY}` names {text!r}, which is not a folder ({folder}); "
                            "fix the path or drop it")
        folders.append(folder)
    return tuple(folders)


def referenced(tree: nodes.Template) -> list[tuple[str | None, int]]:
    """The templates a parsed template includes, imports or extends, with the line of each; None
    for a name only known when it renders."""
    found: list[tuple[str | None, int]] = []
    loads: Iterable[nodes.Extends | nodes.FromImport | nodes.Import | nodes.Include] = tree.find_all(
        (nodes.Extends, nodes.FromImport, nodes.Import, nodes.Include))
    for node in loads:
        names = _constant_names(node.template)
        found.extend((name, node.lineno) for name in (names if names is not None else [None]))
    return found


def _constant_names(node: nodes.Expr) -> list[str] | None:
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, nodes.Const) and isinstance(node.value, (list, tuple)):
        return [str(v) for v in node.value] if all(isinstance(v, str) for v in node.value) else None
    if isinstance(node, (nodes.List, nodes.Tuple)):
        items = [item.value for item in node.items if isinstance(item, nodes.Const)]
        return items if len(items) == len(node.items) and all(isinstance(i, str) for i in items) else None
    return None


def _at(exc: BaseException, template: Path) -> str:
    """`template:line` of the template line that raised, or the template alone when none did."""
    line = _template_line(exc, template)
    return f"{template}:{line}" if line != "?" else str(template)


def _template_line(exc: BaseException, template: Path) -> int | str:
    names = {str(template), os.path.realpath(template)}
    for frame, lineno in reversed(list(traceback.walk_tb(exc.__traceback__))):
        if frame.f_code.co_filename in names or frame.f_code.co_filename.endswith(template.name):
            return lineno
    return "?"
