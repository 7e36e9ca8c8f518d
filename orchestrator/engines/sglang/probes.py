"""The probe patches `orch doctor` writes into SGLang's source: each prints one `[DOCTOR-DEBUG]`
line of key=value fields that the run records as a debug line, and each is reverted like any patch.

A probe is written per engine and per release: the anchors are the lines the engine's own files
carry there. Where releases differ (SGLang's capture call moved from `model_runner.py` to
`model_runner_components/`), a probe has one candidate per release; the doctor keeps the
candidates whose anchor the host's source holds (`orch check`'s patch check), so what runs is
what this host's release accepts."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from orchestrator.core.spec import PatchDef
from orchestrator.engines.probe import TAG, Probe, Probes, patch as _patch

# --- SGLang (every emulated release, and the real wheels: the same lines in srt/models/llama_eagle3.py)
_SGLANG_DRAFT = "sglang:srt/models/llama_eagle3.py"

_SGLANG_WIDTH = _patch(
    "doctor-hidden-width", _SGLANG_DRAFT, "hidden_states = forward_batch.spec_info.hidden_states", "insert_after",
    # once per server: the first draft forward reads the target's hidden states; later steps the draft's own
    'if not getattr(self, "_doctor_width_printed", False):\n'
    "    self._doctor_width_printed = True\n"
    f'    print(f"{TAG} probe=hidden-width width={{hidden_states.shape[-1]}} fc_in={{self.fc.in_features}} '
    'hidden={embeds.shape[-1]}", flush=True)\n')

# Replaced, not inserted: an inserted line takes its anchor's indentation, and these stand in the body.
# The loader's first line keeps the weights and the parameters as they were before loading; the line
# that closes load_weights (it stands before the next method, at the body's indentation) names the
# parameters the loader left untouched and checks d2t against t2d: each draft id mapped the engine's
# way (id + d2t) must be a token t2d marks as the draft's.
_SGLANG_LOAD_OPEN = _patch(
    "doctor-draft-keys-open", _SGLANG_DRAFT, "def load_weights(self, weights) -> None:", "replace",
    "def load_weights(self, weights) -> None:\n"
    "        weights = list(weights)\n"
    "        self._doctor_before = {n: p.data.copy() for n, p in self.named_parameters()}\n"
    # before any weight is placed (a wrong fc stops the load): the checkpoint's fc against the model's
    '        _doctor_fc = [list(w.shape) for n, w in weights if n.endswith("fc.weight")]\n'
    f'        print(f"{TAG} probe=fc-width checkpoint_fc={{_doctor_fc[0] if _doctor_fc else \'-\'}} '
    'fc_in={self.model.fc.in_features}", flush=True)')
# The real wheels' loader (every release this tree emulates) types its weights and holds torch tensors.
_REAL_OPEN_AT = "def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:"
_SGLANG_LOAD_OPEN_REAL = _patch(
    "doctor-draft-keys-open-real", _SGLANG_DRAFT, _REAL_OPEN_AT, "replace",
    _REAL_OPEN_AT + "\n"
    "        weights = list(weights)\n"
    "        self._doctor_before = {n: p.detach().clone() for n, p in self.named_parameters()}\n"
    '        _doctor_fc = [list(w.shape) for n, w in weights if n.endswith("fc.weight")]\n'
    f'        print(f"{TAG} probe=fc-width checkpoint_fc={{_doctor_fc[0] if _doctor_fc else \'-\'}} '
    'fc_in={self.model.fc.in_features}", flush=True)')
_SGLANG_LOAD_CLOSE = _patch(
    "doctor-draft-keys-close", _SGLANG_DRAFT, "def get_hot_token_id(self):", "replace",
    # a replace keeps the text's indentation: the body of load_weights (8), then the next method (4)
    "    _doctor_untouched = [n for n, p in self.named_parameters()\n"
    "                             if n in self._doctor_before and (p.data == self._doctor_before[n]).all()]\n"
    "        _doctor_names = [n for n, _ in weights]\n"
    # the checkpoint's layer prefixes (`layers.0.`, `midlayer.`, `fc.`): what a rename would map
    '        _doctor_prefixes = sorted({".".join(n.split(".")[:2]) + "." if n.startswith("layers.") '
    'else n.split(".")[0] + "." for n in _doctor_names})\n'
    f'        print(f"{TAG} probe=draft-keys checkpoint_keys={{len(_doctor_names)}} '
    "prefixes=[{';'.join(_doctor_prefixes)}] "
    "untouched=[{';'.join(_doctor_untouched)}]\", flush=True)\n"
    "        _doctor_w = dict(weights)\n"
    '        if "d2t" in _doctor_w and "t2d" in _doctor_w:\n'
    '            _doctor_d2t = [int(x) for x in _doctor_w["d2t"].data.tolist()]\n'
    '            _doctor_t2d = [bool(x) for x in _doctor_w["t2d"].data.tolist()]\n'
    "            _doctor_mapped = [i + off for i, off in enumerate(_doctor_d2t)]\n"
    "            _doctor_hits = sum(1 for t in _doctor_mapped if 0 <= t < len(_doctor_t2d) and _doctor_t2d[t])\n"
    "            _doctor_abs = sum(1 for t in _doctor_d2t if 0 <= t < len(_doctor_t2d) and _doctor_t2d[t])\n"
    f'            print(f"{TAG} probe=d2t mapped_in_t2d={{_doctor_hits}} absolute_in_t2d={{_doctor_abs}} '
    'draft_vocab={len(_doctor_d2t)} mapped_max={max(_doctor_mapped)} target_vocab={len(_doctor_t2d)}", flush=True)\n'
    "\n    def get_hot_token_id(self):")


# the same closing line reads torch tensors as it reads the rehearsal's (`.data`, `==`, `.all()`, `.tolist()`)
_SGLANG_LOAD_CLOSE_REAL = dataclasses.replace(_SGLANG_LOAD_CLOSE, name="doctor-draft-keys-close-real",
                                              where="orch doctor probe doctor-draft-keys-close-real")


def _sglang_capture(release: str, file: str, find: str, ids: str) -> PatchDef:
    return _patch(f"doctor-capture-{release}", file, find, "insert_before",
                  f'print(f"{TAG} probe=capture layers={{list({ids}) if {ids} is not None else \'default\'}}", '
                  "flush=True)\n")


_SGLANG_CAPTURE = (
    _sglang_capture("0.5.9", "sglang:srt/model_executor/model_runner.py",
                    "self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)",
                    "self.eagle_aux_hidden_state_layer_ids"),
    _sglang_capture("0.4.10", "sglang:srt/model_executor/model_runner.py",
                    "self.model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)",
                    "eagle_aux_hidden_state_layer_ids"),
    _sglang_capture("0.5.23", "sglang:srt/model_executor/model_runner_components/attention_backend_setup.py",
                    "model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_layer_ids)",
                    "eagle_aux_hidden_state_layer_ids"),
)

# the EAGLE worker, as the draft takes the target's embedding and head: both vocabularies side by side
_SGLANG_VOCAB = _patch(
    "doctor-vocab", "sglang:srt/speculative/eagle_worker.py", "embed, head = target_worker.model.get_embed_and_head()",
    "insert_after",
    f'print(f"{TAG} probe=vocab target_vocab={{head.shape[0]}} draft_config_vocab={{draft.config.vocab_size}} '
    "draft_vocab={getattr(draft.config, 'draft_vocab_size', None)}\", flush=True)\n")

SGLANG = (
    Probe("hidden-width", "the hidden-state width reaching the draft, against its fc input width", (_SGLANG_WIDTH,)),
    # one candidate per release: the host keeps the one whose anchor its source holds
    *(Probe("capture", "the target layers the engine asks to capture, against the draft's aux layer ids", (p,))
      for p in _SGLANG_CAPTURE),
    Probe("draft-keys", "the checkpoint's fc against the model's; the keys the loader placed and the draft parameters "
          "it left untouched; d2t against t2d",
          (_SGLANG_LOAD_OPEN, _SGLANG_LOAD_CLOSE)),
    Probe("draft-keys", "the same on the real wheels' loader", (_SGLANG_LOAD_OPEN_REAL, _SGLANG_LOAD_CLOSE_REAL)),
    Probe("vocab", "the target's vocabulary (its lm_head) against the draft config's", (_SGLANG_VOCAB,)),
)

_CLASS = re.compile(r"target class (\w+) \(([\w/.]+\.py)\)")
_CAPTURE = "set_eagle3_layers_to_capture"


def capture_patch(finding: dict[str, Any]) -> PatchDef | None:
    """The aux-capture method the target class lacks (the preflight's `aux-capture-missing` names the
    class and its file), forwarded to the inner model that has it, as newer releases write it: a
    mixin base in the class's own file."""
    found = _CLASS.search(str(finding.get("what")))
    if found is None:
        return None
    cls, file = found[1], found[2]
    mixin = (f"class _DoctorAuxCapture:\n"
             f"    def {_CAPTURE}(self, layer_ids=None):\n"
             f"        # forwarded to the inner (text) model that captures, as newer releases do\n"
             f"        inner = next(m for m in vars(self).values() if hasattr(m, \"{_CAPTURE}\"))\n"
             f"        inner.{_CAPTURE}(layer_ids)\n\n\n"
             f"class {cls}(_DoctorAuxCapture, ")
    return PatchDef(name="doctor-aux-capture", file=f"sglang:{file}", where="orch doctor fix", find=f"class {cls}(",
                    action="replace", text=mixin)


PROBES = Probes(SGLANG, "speculative_algorithm", ("EAGLE", "NEXTN"), "EAGLE3", capture_patch)
