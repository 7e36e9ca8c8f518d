"""The rehearsal tokenizer: a fixed vocabulary of made-up two-syllable words.

Known words round-trip; any other word maps to a stable id by CRC-32.
"""

from __future__ import annotations

import zlib

SPECIAL = ["<unk>", "<s>", "</s>"]
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


class RehearsalTokenizer:
    bos_token_id = 1
    eos_token_id = 2

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        n = len(SYLLABLES)
        self.words = SPECIAL + [SYLLABLES[i % n] + SYLLABLES[(i // n) % n] for i in range(vocab_size - len(SPECIAL))]
        self.ids = {word: i for i, word in enumerate(self.words)}

    def encode(self, text: str) -> list[int]:
        ids = [self.bos_token_id]
        for word in text.split():
            ids.append(self.ids.get(word, len(SPECIAL) + zlib.crc32(word.encode()) % (self.vocab_size - len(SPECIAL))))
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(" " + self.words[i] for i in ids if i >= len(SPECIAL))


def get_tokenizer(vocab_size: int) -> RehearsalTokenizer:
    return RehearsalTokenizer(vocab_size)
