import pytest
import yaml

from orchestrator.core import patching
from orchestrator.errors import PatchError
from orchestrator.core.spec import PatchDef

SOURCE = """\
class M:
    def forward(self, forward_batch, embeds):
        hidden_states = forward_batch.spec_info.hidden_states
        if hidden_states.shape[-1] != embeds.shape[-1]:
            hidden_states = self.fc(hidden_states)
        return hidden_states
"""


def patch(action, text, find="hidden_states = forward_batch.spec_info.hidden_states", count=1):
    return PatchDef("p", "sglang:x.py", "e.yaml:3", find, action, text, count)


def test_insert_after_takes_the_anchor_lines_indentation():
    out = patching.apply(patch("insert_after", 'print("[X-DEBUG] a=1")\nif True:\n    pass\n'), SOURCE, "h:x.py")
    lines = out.splitlines()
    assert lines[3] == '        print("[X-DEBUG] a=1")'
    assert lines[4] == "        if True:" and lines[5] == "            pass"
    assert lines[6].strip().startswith("if hidden_states.shape")


def test_insert_before_and_replace():
    before = patching.apply(patch("insert_before", "x = 0"), SOURCE, "h")
    assert before.splitlines()[2] == "        x = 0"
    replaced = patching.apply(patch("replace", "hidden_states = forward_batch.spec_info.aux"), SOURCE, "h")
    assert "spec_info.aux" in replaced and "spec_info.hidden_states" not in replaced


@pytest.mark.parametrize("find, found", [("no such text", 0), ("hidden_states", 6)])
def test_anchor_must_occur_exactly_once(find, found):
    with pytest.raises(PatchError) as err:
        patching.apply(patch("replace", "y", find=find), SOURCE, "host:/x.py")
    message = str(err.value)
    assert f"occurs {found} times in host:/x.py, expected exactly once" in message
    assert message.startswith("e.yaml:3: patch 'p'") and "Nothing was changed" in message


def test_count_allows_several_occurrences():
    out = patching.apply(patch("replace", "hs", find="hidden_states", count=6), SOURCE, "h")
    assert "hidden_states" not in out and out.count("hs") == 6


DIFF = """\
--- a/x.py
+++ b/x.py
@@ -3,2 +3,3 @@
         hidden_states = forward_batch.spec_info.hidden_states
+        print("[X-DEBUG] shape", hidden_states.shape)
         if hidden_states.shape[-1] != embeds.shape[-1]:
"""


def test_unified_diff_applies_with_exact_context_and_round_trips():
    d = PatchDef("d", "x.py", "e.yaml:9", diff=DIFF)
    out = patching.apply(d, SOURCE, "h")
    assert out.splitlines()[3] == '        print("[X-DEBUG] shape", hidden_states.shape)'
    added = [l for l in patching.unified(SOURCE, out, "x.py").splitlines() if l.startswith("+") and not l.startswith("+++")]
    assert added == ['+        print("[X-DEBUG] shape", hidden_states.shape)']


def test_unified_diff_at_another_offset_still_applies():
    d = PatchDef("d", "x.py", "e.yaml:9", diff=DIFF)
    shifted = "# header\n# more\n" + SOURCE
    assert "[X-DEBUG]" in patching.apply(d, shifted, "h")


def test_unified_diff_that_does_not_apply_names_the_hunk():
    d = PatchDef("d", "x.py", "e.yaml:9", diff=DIFF.replace("embeds.shape", "other.shape"))
    with pytest.raises(PatchError, match=r"hunk 1 \(at line 3\) does not apply to h"):
        patching.apply(d, SOURCE, "h")


def test_removed_line_starting_with_dashes_is_not_a_header():
    source = "a\n-- b\nc\n"
    diff = "--- a/f\n+++ b/f\n@@ -1,3 +1,2 @@\n a\n--- b\n c\n"
    assert patching.apply(PatchDef("d", "f", "w", diff=diff), source, "h") == "a\nc\n"


# -- `replace:` text dedented relative to the match (a YAML block scalar) -------------------------


def block_scalar_replace(find: str, body: str, count: int = 1) -> PatchDef:
    """`find:` and a `replace: |-` as a user writes them in an experiment file (YAML strips the indent)."""
    text = f"find: {find!r}\nreplace: |-\n" + "".join(f"  {line}\n" for line in body.splitlines())
    loaded = yaml.safe_load(text)
    return PatchDef("p", "sglang:x.py", "e.yaml:3", loaded["find"], "replace", loaded["replace"], count)


DEBUG_BODY = """\
hidden_states = forward_batch.spec_info.hidden_states
if not getattr(self, "_printed", False):
    self._printed = True
    print("[DEBUG]", hidden_states.shape)"""


def test_a_block_scalar_replace_is_reindented_to_the_match():
    p = block_scalar_replace("hidden_states = forward_batch.spec_info.hidden_states", DEBUG_BODY)
    assert "\nif not getattr" in p.text  # as YAML hands it over: the 8 spaces are gone
    out = patching.apply(p, SOURCE, "h")
    assert out.splitlines()[2:6] == [
        "        hidden_states = forward_batch.spec_info.hidden_states",
        '        if not getattr(self, "_printed", False):',
        "            self._printed = True",
        '            print("[DEBUG]", hidden_states.shape)',
    ]
    assert out.splitlines()[6] == "        if hidden_states.shape[-1] != embeds.shape[-1]:"
    compile(out, "x.py", "exec")


def test_replace_text_written_at_the_files_indentation_is_kept_as_written():
    absolute = DEBUG_BODY.replace("\n", "\n        ")  # every line after the first at the match's indentation
    out = patching.apply(patch("replace", absolute), SOURCE, "h")
    assert out == SOURCE.replace("hidden_states = forward_batch.spec_info.hidden_states", absolute)
    source = "def f():\n    if x:\n        y()\n"  # the `if` dropped: its body moves left on purpose
    assert patching.apply(patch("replace", "    y()", find="    if x:\n        y()"), source, "h") == "def f():\n    y()\n"
    assert patching.apply(patch("replace", "if x:\n    y()", find="x"), "x\n", "h") == "if x:\n    y()\n"


def test_a_find_from_column_zero_gets_every_line_reindented():
    find = "        if hidden_states.shape[-1] != embeds.shape[-1]:\n            hidden_states = self.fc(hidden_states)"
    out = patching.apply(patch("replace", "if True:\n    hidden_states = self.fc(hidden_states)", find=find), SOURCE, "h")
    assert out.splitlines()[3:5] == ["        if True:", "            hidden_states = self.fc(hidden_states)"]


def test_each_occurrence_is_reindented_to_its_own_line():
    source = "def f():\n    a = 1\n    if b:\n        a = 1\n"
    out = patching.apply(patch("replace", "a = 1\nprint(a)", find="a = 1", count=2), source, "h")
    assert out == "def f():\n    a = 1\n    print(a)\n    if b:\n        a = 1\n        print(a)\n"
    compile(out, "x.py", "exec")
