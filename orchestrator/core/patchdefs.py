"""An experiment's `patches:`: each a named `find` + action, or a unified diff file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import SpecError

from . import names as identifiers, readers, yamlfile
from .yamlfile import Located

PATCH_ACTIONS = ("replace", "insert_after", "insert_before")


@dataclass(frozen=True)
class PatchDef:
    """One named patch: `find` + an action, or a unified `diff` file."""

    name: str
    file: str
    where: str
    find: str | None = None
    action: str | None = None
    text: str | None = None
    count: int = 1
    diff: str | None = None


def read(data: Located, path: Path) -> dict[str, PatchDef]:
    patches = {}
    mapping = readers.mapping(data, "patches")
    for name, body in mapping.items():
        where = mapping.where(name)
        identifiers.identifier(name, where, "patch name", "rename the patch")
        body = yamlfile.require_mapping(body, where, f"patch '{name}'")
        yamlfile.check_keys(body, {"file", "find", "count", "diff", *PATCH_ACTIONS}, f"patch '{name}'")
        if not isinstance(body.get("file"), str) or not body["file"]:
            raise SpecError(f"{where}: patch '{name}' needs `file:` (an absolute path or PACKAGE:path)")
        if not body["file"].startswith("/") and ":" not in body["file"]:  # a relative path means nothing on a host
            raise SpecError(f"{body.where('file')}: patch '{name}' `file:` {body['file']!r} is neither an absolute path "
                            "nor PACKAGE:path (a file of a Python package on the host, e.g. mypackage:models/draft.py)")
        if any(ord(c) < 32 for c in body["file"]):
            raise SpecError(f"{body.where('file')}: patch '{name}' `file:` {body['file']!r} holds a control character "
                            "(a newline, a tab, ...); give the path on one line")
        actions = [a for a in PATCH_ACTIONS if a in body]
        if "diff" in body:
            if "find" in body or actions:
                raise SpecError(f"{where}: patch '{name}' has `diff:` and `find:`; use one of them")
            diff_path = path.parent / str(body["diff"])
            if not readers.is_file(diff_path):
                raise SpecError(f"{body.where('diff')}: diff file {diff_path} not found")
            patches[name] = PatchDef(name, body["file"], where, diff=_diff_text(diff_path, body.where("diff")))
            continue
        if not isinstance(body.get("find"), str) or not body["find"]:
            raise SpecError(f"{where}: patch '{name}' needs `find:` text (or `diff:` a unified diff file)")
        if len(actions) != 1:
            raise SpecError(
                f"{where}: patch '{name}' needs exactly one of replace / insert_after / insert_before"
            )
        text = body[actions[0]]
        if not isinstance(text, str):
            raise SpecError(f"{body.where(actions[0])}: `{actions[0]}` must be text")
        count = readers.positive_int(body, "count", 1)
        patches[name] = PatchDef(name, body["file"], where, body["find"], actions[0], text, count)
    return patches



def _diff_text(path: Path, where: str) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"{where}: diff file {path} is not UTF-8 text; give a unified diff (diff -u)") from None
    except OSError as exc:
        raise SpecError(f"{where}: cannot read diff file {path} ({exc.strerror or exc})") from None
