"""Whether a draft's tokenizer is its target's: engine-neutral, read from the checkpoint folders.

An EAGLE-3 draft proposes token ids of the target's vocabulary; a draft trained on another
tokenizer proposes ids that mean other text to the target, and almost all are rejected (accept
length ~1.0) while every shape still fits. Most drafts ship no tokenizer (the engine loads the
target's); when one does, its vocabulary is compared with the target's file of the same kind,
token by token, so a re-serialised file with the same vocabulary agrees.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .finding import ERROR, INFO, WARNING, Finding

if TYPE_CHECKING:  # the preflights hand their reader in; the pure half imports no I/O
    from .hostfiles import HostFiles

# tokenizer files by the kind of vocabulary they hold, in the order they are tried
FILES = ("tokenizer.json", "tiktoken.model", "vocab.json", "tokenizer.model")
LIMIT = 64 * 2**20  # a bigger file is not a tokenizer: it is named and not read
EXAMPLES = 3
CODES = ("tokenizer-mismatch", "tokenizer-added-tokens", "tokenizer-differs", "tokenizer-invalid", "tokenizer-unpaired",
         "tokenizer-unread")  # both engines' preflights carry them


@dataclass(frozen=True)
class Vocabulary:
    file: str
    tokens: dict[str, int]  # token text -> id; empty where the file's form is not read (tokenizer.model)
    added: dict[str, int]  # special and added tokens -> id (tokenizer.json's added_tokens)
    raw: bytes


def parse(name: str, data: bytes) -> Vocabulary:
    """The vocabulary `name` holds; ValueError when it is not the form its name says."""
    if name == "tokenizer.json":
        doc = json.loads(data)
        vocab = (doc.get("model") or {}).get("vocab")
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
            tokens = {str(entry[0]): i for i, entry in enumerate(vocab)}
        elif isinstance(vocab, dict):
            tokens = {str(k): int(v) for k, v in vocab.items()}
        else:
            raise ValueError("no model.vocab")
        added = {str(t["content"]): int(t["id"]) for t in doc.get("added_tokens") or [] if "content" in t}
        return Vocabulary(name, tokens, added, data)
    if name == "vocab.json":
        return Vocabulary(name, {str(k): int(v) for k, v in json.loads(data).items()}, {}, data)
    if name == "tiktoken.model":  # `base64(token bytes) rank` per line
        tokens = {}
        for line in data.splitlines():
            if line.strip():
                piece, rank = line.split()
                tokens[base64.b64decode(piece).decode("utf-8", "backslashreplace")] = int(rank)
        return Vocabulary(name, tokens, {}, data)
    return Vocabulary(name, {}, {}, data)  # sentencepiece's protobuf: compared byte for byte


def compare(target: Vocabulary, draft: Vocabulary, target_path: str, draft_path: str) -> list[Finding]:
    """The draft's vocabulary against the target's: a token with another id (or none) is a mismatch;
    the same vocabulary with other added tokens is a warning."""
    if target.raw == draft.raw:
        return []
    if not target.tokens and not draft.tokens:
        return [Finding(WARNING, "tokenizer-differs", f"{draft_path}/{draft.file} is not the bytes of "
                        f"{target_path}/{target.file}", "orch does not read this form token by token: the draft may "
                        "have been trained on another tokenizer", "ship the draft without a tokenizer, or with the target's")]
    moved = [(t, i, draft.tokens.get(t)) for t, i in sorted(target.tokens.items(), key=lambda item: item[1])
             if draft.tokens.get(t) != i]
    extra = len(set(draft.tokens) - set(target.tokens))
    if moved:
        examples = ", ".join(f"{t!r}: {i} in the target's, {'absent' if d is None else d} in the draft's"
                             for t, i, d in moved[:EXAMPLES])
        return [Finding(ERROR, "tokenizer-mismatch",
                        f"{draft_path}/{draft.file} maps {len(moved)} of the target's {len(target.tokens)} tokens "
                        f"otherwise than {target_path}/{target.file}" + (f" and has {extra} it lacks" if extra else "")
                        + (f" (e.g. {examples})" if examples else ""),
                        "the draft was trained on another tokenizer: its token ids mean other text to the target, so "
                        "almost every draft token is rejected (accept length ~1.0)",
                        "serve the target (and tokenizer) the draft was trained for, or train the draft on this target's")]
    if extra or target.added != draft.added:
        return [Finding(WARNING, "tokenizer-added-tokens", f"{draft_path}/{draft.file} has the target's vocabulary but "
                        + (f"{extra} more tokens" if extra else "other added or special tokens"), "a draft proposing a special token the target names otherwise "
                        "is rejected there", "ship the draft with the target's tokenizer files")]
    return []


async def check(files: HostFiles, target_path: str, draft_path: str) -> list[Finding]:
    """The draft's own tokenizer, where it has one, against the target's file of the same kind."""
    for name in FILES:
        if not await files.exists(f"{draft_path}/{name}"):
            continue
        if not await files.exists(f"{target_path}/{name}"):
            return [Finding(INFO, "tokenizer-unpaired", f"{draft_path}/{name} has no counterpart in {target_path}",
                            "the engine loads the target's tokenizer; the draft's is not compared",
                            "ship the draft without a tokenizer, or with the target's")]
        return await _compared(files, name, target_path, draft_path)
    return []


async def _compared(files: HostFiles, name: str, target_path: str, draft_path: str) -> list[Finding]:
    read: list[Vocabulary] = []
    for folder in (target_path, draft_path):
        path = f"{folder}/{name}"
        if await files.size(path) > LIMIT:
            return [Finding(INFO, "tokenizer-unread", f"{path} is over {LIMIT // 2**20} MiB", "not compared",
                            "check the draft's tokenizer by hand")]
        try:
            read.append(parse(name, await files.read(path)))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            return [Finding(WARNING, "tokenizer-invalid", f"{path} is not a {name} orch can read: {exc}",
                            "the engine may fail to load it, and it was not compared", "re-export the tokenizer")]
    return compare(read[0], read[1], target_path, draft_path)
