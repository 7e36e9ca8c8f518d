"""python -m orchestrator.tinymodels --out DIR [--link PATH]

Makes (or reuses) DIR/<key>/ holding target/, draft/, the fault copies, faults.json, prompts.jsonl and
build.json (times and offline checks); prints the folders as JSON on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # everything is made here; nothing may be fetched

import torch  # noqa: E402

from . import cache, draft, faults, language, target  # noqa: E402
from .settings import Settings  # noqa: E402


def make(settings: Settings, folder: Path) -> dict[str, str]:
    torch.set_num_threads(settings.threads)
    started = time.monotonic()
    words = language.make(settings)
    model = target.train(settings, words)
    target.save(model, words, folder / "target")  # now bf16, as served: the draft learns from that
    target_s = time.monotonic() - started
    follows = target.follows_rule(model, words, settings.seed + 6)
    print(f"target: {target_s:.0f} s, follows the rule on {follows:.1%} of next words", file=sys.stderr)

    data = draft.traces(settings, words, model, settings.draft_sequences, settings.seed + 2)
    held_out = draft.traces(settings, words, model, 64, settings.seed + 5)
    trained, kept = draft.train(settings, data, model.model.embed_tokens.weight.detach())
    draft.save(settings, trained, kept, folder / "draft")
    shares = draft.acceptance(trained, kept, held_out, settings.unroll)
    draft_s = time.monotonic() - started - target_s
    print(f"draft: {draft_s:.0f} s, offline: all of the first k drafts right for k = 1..{settings.unroll}: "
          f"{', '.join(f'{s:.1%}' for s in shares)} (accept length {1 + sum(shares):.2f})", file=sys.stderr)

    with open(folder / "prompts.jsonl", "w") as out:
        for prompt in words.prompts(64, settings.seed + 7):
            out.write(json.dumps({"prompt": prompt}) + "\n")
    made = faults.make(settings, folder)
    facts = {"target_s": round(target_s, 1), "draft_s": round(draft_s, 1),
             "total_s": round(time.monotonic() - started, 1), "target_follows_rule": round(follows, 4),
             "draft_offline_accept_length": round(1 + sum(shares), 3), "draft_offline_shares": shares}
    (folder / "build.json").write_text(json.dumps(facts, indent=2) + "\n")
    return {"target": "target", "draft": "draft", **made, "prompts": "prompts.jsonl", "build": "build.json"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.tinymodels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True,
                        help="the cache folder, one per machine (the Makefile gives the real engine cache's models/)")
    parser.add_argument("--link", type=Path, help="a symlink to point at the models' folder (e.g. a clone's .tinymodels)")
    args = parser.parse_args(argv)
    settings = Settings()
    folder = cache.build(args.out.resolve(), settings, lambda work: make(settings, work))
    if args.link:
        cache.link(args.link, folder)
    made = json.loads((folder / cache.DONE).read_text())["made"]
    print(json.dumps({"root": str(folder), **{name: str(folder / path) for name, path in made.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
