"""The host's installed SGLang read for the EAGLE-3 preflight (the questions are in
engines/sglang/source.py): one survey command (the model-runner files, the speculative workers
that ask the target for `get_embed_and_head`, every EntryClass line), then only the files the
questions need, several per round trip; nothing is imported or run."""

from __future__ import annotations

import posixpath
from typing import Any

from orchestrator.core import patching, shell
from . import classes, source, survey
from .facts import Capture
from .classes import Support
from .source import HostSource
from orchestrator.errors import PatchError
from orchestrator.core.spec import PatchDef

LLAMA_EAGLE3 = "srt/models/llama_eagle3.py"
ROUNDS = 6  # file reads one class question may take (a base or an inner model in another file each)


async def read_files(conn: Any, sglang: str, relatives: list[str]) -> dict[str, str | None]:
    """{relative path: text, or None when the host has no such file}, in one command."""
    if not relatives:
        return {}
    done = await conn.run(shell.cat_files([f"{sglang}/{r}" for r in relatives]), idempotent=True)
    return split_files(done.stdout, relatives)


def split_files(data: bytes, relatives: list[str]) -> dict[str, str | None]:
    """`shell.cat_files` output -> texts (a file cut short reads as what arrived)."""
    found: dict[str, str | None] = {}
    at = 0
    for relative in relatives:
        end = data.find(b"\n", at)
        try:
            size = int(data[at:end].strip()) if end >= 0 else -1
        except ValueError:
            size = -1
        at = end + 1 if end >= 0 else len(data)
        found[relative] = data[at : at + size].decode("utf-8", errors="replace") if size >= 0 else None
        at += max(size, 0)
    return found


async def host_source(conn: Any, sglang: str, target_archs: list[str],
                      draft_archs: list[str]) -> tuple[HostSource, dict[str, str | None], str | None]:
    """The host's facts, the texts read so far, and the target architecture SGLang would load
    (the first of the config's list that the host registers)."""
    found = await conn.run(survey.speculative_survey(f"{sglang}/srt", source.EMBED_HEAD), idempotent=True)
    executor, snippets = source.survey(found.out)
    registry = source.registry(snippets)
    target = next((a for a in target_archs if a in registry), target_archs[0] if target_archs else None)
    wanted = [*executor, LLAMA_EAGLE3, *source.CONTEXT_FILES, *([registry[target]] if target in registry else [])]
    sources = await read_files(conn, sglang, list(dict.fromkeys(wanted)))
    quoted = {}
    if registry and draft_archs and not any(a in registry for a in draft_archs) and draft_archs[0].isidentifier():
        named = (await conn.run(shell.file_quoting(f"{sglang}/srt", draft_archs[0]), idempotent=True)).out.strip()
        if named:
            quoted[draft_archs[0]] = named[len(sglang) + 1 :] if named.startswith(sglang + "/") else named
    facts = HostSource(source.gate(sources), source.ask(sources), registry, quoted, source.longer_context(sources),
                       source.embed_head_call(sources))
    return facts, sources, target


async def capture(conn: Any, sglang: str, registry: dict[str, str], sources: dict[str, str | None], arch: str,
                  patches: tuple[PatchDef, ...], method: str) -> Capture:
    """Has the target class `method` (source.METHOD, source.EMBED_HEAD), as installed, or once this
    run's patches apply?"""
    installed = await _support(conn, sglang, arch, registry, sources, {}, method)
    if installed.has is not False:
        return Capture(arch, installed.file, installed.has, chain=installed.chain)
    mine = _by_file(patches, sglang)
    if not mine:
        return Capture(arch, installed.file, False, refusal=installed.refusal, chain=installed.chain)
    patched = await _support(conn, sglang, arch, registry, sources, mine, method)
    if patched.has:
        return Capture(arch, installed.file, False, await _needed(conn, sglang, arch, registry, sources, mine, method),
                       chain=patched.chain)
    return Capture(arch, installed.file, False, refusal=patched.refusal or installed.refusal, chain=patched.chain)


async def _needed(conn: Any, sglang: str, arch: str, registry: dict[str, str], sources: dict[str, str | None],
                  mine: dict[str, list[PatchDef]], method: str) -> tuple[str, ...]:
    """The patches without which the method would still be missing (a debug print on the same run is not one)."""
    needed = []
    for path, patches in mine.items():
        for patch in patches:
            others = {**mine, path: [p for p in patches if p is not patch]}
            if (await _support(conn, sglang, arch, registry, sources, others, method)).has is not True:
                needed.append(patch.name)
    return tuple(needed) or tuple(p.name for patches in mine.values() for p in patches)  # several add it alike


async def _support(conn: Any, sglang: str, arch: str, registry: dict[str, str], sources: dict[str, str | None],
                   mine: dict[str, list[PatchDef]], method: str) -> Support:
    for _ in range(ROUNDS):
        found = classes.support(arch, registry, _patched(sources, mine) if mine else sources, method)
        if isinstance(found, Support):
            return found
        sources.update(await read_files(conn, sglang, list(found.files)))
    return Support(arch, None, None)


def _by_file(patches: tuple[PatchDef, ...], sglang: str) -> dict[str, list[PatchDef]]:
    """This run's patches by the file they change, relative to the sglang package."""
    found: dict[str, list[PatchDef]] = {}
    for patch in patches:
        relative = package_relative(patch.file, sglang)
        if relative:
            found.setdefault(relative, []).append(patch)
    return found


def package_relative(file: str, sglang: str) -> str | None:
    """`sglang:srt/x.py`, `sglang.srt:x.py` or `<sglang folder>/srt/x.py` -> `srt/x.py`."""
    folder = sglang.rstrip("/")
    if file.startswith(folder + "/"):
        return posixpath.normpath(file[len(folder) + 1 :])
    package, colon, rest = file.partition(":")
    parts = package.split(".")
    if not colon or file.startswith("/") or parts[0] != "sglang":
        return None
    return posixpath.normpath("/".join([*parts[1:], rest]))


def _patched(sources: dict[str, str | None], mine: dict[str, list[PatchDef]]) -> dict[str, str | None]:
    """The texts as they will be once the run's patches apply (one that does not apply is left out:
    the run's own patch step names it)."""
    view = dict(sources)
    for path, patches in mine.items():
        text = view.get(path)
        for patch in patches if text is not None else ():
            try:
                text = patching.apply(patch, text, path)
            except PatchError:
                continue
        if path in view:
            view[path] = text
    return view
