"""The survey command of the EAGLE-3 preflight: one round trip that finds, in an installed
SGLang's `srt` folder, the files its questions read (source.survey parses the output). It knows
SGLang's package layout: the model runner in `model_executor/`, the registered architectures in
`models/*.py` (their `EntryClass` statements), the speculative workers in `speculative/`."""

from __future__ import annotations

import re

from orchestrator.core import shell

ENTRY_CLASS_AWK = (  # every line of each top-level `EntryClass = ...` statement, brackets followed
    'FNR == 1 { on = 0 } /^EntryClass[ \\t]*=/ { on = 1; depth = 0 } '
    'on { print "E\\t" FILENAME "\\t" FNR "\\t" $0; o = $0; depth += gsub(/[[(]/, "", o); '
    'o = $0; depth -= gsub(/[])]/, "", o); if (depth <= 0) on = 0 }'
)


def eagle3_survey(srt: str) -> str:
    """What the EAGLE-3 preflight reads first from an installed SGLang's `srt` folder, one fact a line:
    `X<TAB>model_executor/<file>.py` for each model-runner file naming `is_eagle3(` or
    `set_eagle3_layers_to_capture`, then `E<TAB><file>.py<TAB><line><TAB><text>` for the lines of each
    `EntryClass = ...` statement in `models/*.py` (the architectures SGLang registers)."""
    runner = shell.quote(r"is_eagle3\(|set_eagle3_layers_to_capture")
    return (f"cd {shell.path(srt)} || exit 1; grep -rlE --include='*.py' -- {runner} model_executor 2>/dev/null"
            f" | awk '{{print \"X\\t\" $0}}'; cd models && awk {shell.quote(ENTRY_CLASS_AWK)} *.py; true")


def speculative_survey(srt: str, method: str) -> str:
    """`eagle3_survey`, then `S<TAB>speculative/<file>.py` for each speculative-worker file calling
    `.<method>(` (where the workers ask the target model for it)."""
    pattern = shell.quote(rf"\.{re.escape(method)}\(")
    return (f"( {eagle3_survey(srt)} ); cd {shell.path(srt)} 2>/dev/null && grep -rlE --include='*.py' -- {pattern}"
            f" speculative 2>/dev/null | awk '{{print \"S\\t\" $0}}'; true")
