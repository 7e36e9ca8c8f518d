"""The synthetic language the tiny target speaks, and its word-level tokenizer.

A sentence is a rule word then a chain of spoken words: the next word is the current word's successor
under the sentence's rule (each rule a different random cycle through the same words). So the next word
depends on the current word AND on the first word of the prompt: a draft that ignores the target's
hidden states (which carry the rule) cannot know which successor comes next.

Spoken words are drawn at random from the whole vocabulary, so the draft's 256-word vocabulary maps to
target ids spread up to the last one: a d2t read the wrong way round then points past the vocabulary.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from .settings import Settings

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")  # ids 0..3
PAD, UNK, BOS, EOS = range(4)


@dataclass(frozen=True)
class Language:
    vocab: tuple[str, ...]  # the token of each id
    rules: tuple[int, ...]  # ids of the rule words
    spoken: tuple[int, ...]  # ids of the words sentences are made of
    successor: tuple[dict[int, int], ...]  # per rule: word id -> next word id
    sequence_length: int

    def sentence(self, rng: random.Random, length: int | None = None) -> list[int]:
        rule = rng.randrange(len(self.rules))
        word = rng.choice(self.spoken)
        ids = [self.rules[rule], word]
        while len(ids) < (length or self.sequence_length):
            word = self.successor[rule][word]
            ids.append(word)
        return ids

    def prompts(self, count: int, seed: int) -> list[str]:
        """Prompts of the language (a rule word and 2 to 7 words of its chain), as text."""
        rng = random.Random(seed)
        return [" ".join(self.vocab[i] for i in self.sentence(rng, rng.randint(3, 8))) for _ in range(count)]


def make(settings: Settings) -> Language:
    rng = random.Random(settings.seed)
    ids = list(range(len(SPECIALS), settings.vocab_size))
    rng.shuffle(ids)
    rules = tuple(sorted(ids[:settings.rules]))
    spoken = tuple(sorted(ids[settings.rules:settings.rules + settings.spoken_words]))
    vocab = list(SPECIALS) + [f"w{i}" for i in range(len(SPECIALS), settings.vocab_size)]
    for number, rule in enumerate(rules):
        vocab[rule] = f"r{number}"
    successor = []
    for _ in rules:
        cycle = list(spoken)
        rng.shuffle(cycle)  # one cycle through every word: a chain never repeats within a sentence
        successor.append({word: cycle[(k + 1) % len(cycle)] for k, word in enumerate(cycle)})
    return Language(tuple(vocab), rules, spoken, tuple(successor), settings.sequence_length)


def save_tokenizer(language: Language, folder: Path) -> None:
    """A WordLevel tokenizer over the vocabulary, wrapped so that the serving engine loads it as any
    fast tokenizer (bos/eos/unk/pad named; no post-processor, so prompts are encoded as written)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({word: i for i, word in enumerate(language.vocab)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with a space
    wrapped = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                      unk_token="<unk>", pad_token="<pad>")
    wrapped.save_pretrained(folder)
