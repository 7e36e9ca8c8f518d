"""The probe patches `orch doctor` writes into vLLM's source (see engines/probe.py): the real vLLM's
`model_executor/models/llama_eagle3.py` (0.32.0 as the CPU wheel ships it) and the stand-in's file of
the same name. Each prints one `[DOCTOR-DEBUG]` line of key=value fields; the doctor keeps the
probes whose anchors the host's installed source holds, and every one is reverted like any patch
(the real engine's files end as its wheel's RECORD says)."""

from __future__ import annotations

from orchestrator.engines.probe import TAG, Probe, Probes, no_capture_patch, patch as _patch

_DRAFT = "vllm:model_executor/models/llama_eagle3.py"

# d2t against t2d, read from the checkpoint's own tensors before the loader consumes them: each draft
# id mapped the engine's way (id + d2t) must be a token t2d marks; `absolute_in_t2d` reads d2t as ids.
_D2T = (
    '        _doctor_w = dict(weights)\n'
    '        if "d2t" in _doctor_w and "t2d" in _doctor_w:\n'
    '            _doctor_d2t = [int(x) for x in _doctor_w["d2t"].tolist()]\n'
    '            _doctor_t2d = [bool(x) for x in _doctor_w["t2d"].tolist()]\n'
    "            _doctor_mapped = [i + off for i, off in enumerate(_doctor_d2t)]\n"
    "            _doctor_hits = sum(1 for t in _doctor_mapped if 0 <= t < len(_doctor_t2d) and _doctor_t2d[t])\n"
    "            _doctor_abs = sum(1 for t in _doctor_d2t if 0 <= t < len(_doctor_t2d) and _doctor_t2d[t])\n"
    f'            print(f"{TAG} probe=d2t mapped_in_t2d={{_doctor_hits}} absolute_in_t2d={{_doctor_abs}} '
    'draft_vocab={len(_doctor_d2t)} mapped_max={max(_doctor_mapped)} target_vocab={len(_doctor_t2d)}", flush=True)\n'
)


def _fc(fc_in: str) -> str:
    """The checkpoint's fc against the width the engine built (`fc_in`: the expression for it, in
    single quotes: it stands inside a double-quoted f-string)."""
    return ('        _doctor_fc = [list(w.shape) for n, w in weights if n.endswith("fc.weight")]\n'
            f'        print(f"{TAG} probe=fc-width checkpoint_fc={{_doctor_fc[0] if _doctor_fc else \'-\'}} '
            f'fc_in={{{fc_in}}}", flush=True)\n')


# --- the real vLLM (0.32.0)
_REAL_OPEN_AT = "def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]):\n        model_weights = {}"
_REAL_CLOSE_AT = "        loader = AutoWeightsLoader(self)\n        loader.load_weights("  # the draft's, not the model's
_REAL_WIDTH = _patch(
    "doctor-hidden-width-real", _DRAFT, "# combine multiple auxiliary hidden states returned by eagle3", "insert_after",
    'if not getattr(self, "_doctor_width_printed", False):\n'
    "    self._doctor_width_printed = True\n"
    f'    print(f"{TAG} probe=hidden-width width={{hidden_states.shape[-1]}} fc_in={{self.model.fc.input_size}} '
    'hidden={self.config.hidden_size}", flush=True)\n')
# Replaced, not inserted: an inserted line takes its anchor's indentation, and these stand in the
# loader's body. The opening keeps the weights (a list: the loader reads them once) and the
# parameters as they were; the closing, after the engine's own loader ran, names those left untouched.
_REAL_OPEN = _patch(
    "doctor-draft-keys-open-real", _DRAFT, _REAL_OPEN_AT, "replace",
    _REAL_OPEN_AT + "\n"
    "        weights = list(weights)\n"
    "        self._doctor_before = {n: p.detach().clone() for n, p in self.named_parameters()}\n"
    + _fc("self.model.fc.input_size if getattr(self.model, 'fc', None) is not None else '-'") + _D2T.rstrip("\n"))
_REAL_CLOSE = _patch(
    "doctor-draft-keys-close-real", _DRAFT, _REAL_CLOSE_AT, "replace",
    # the engine's own loader, wrapped: what it left untouched is known only after it ran
    "        loader = AutoWeightsLoader(self)\n"
    "        _doctor_load = loader.load_weights\n"
    "\n"
    "        def _doctor_then_report(*args, **kwargs):\n"
    "            loaded = _doctor_load(*args, **kwargs)\n"
    "            _doctor_untouched = [n for n, p in self.named_parameters()\n"
    "                                 if n in self._doctor_before and torch.equal(p.detach(), self._doctor_before[n])]\n"
    '            _doctor_prefixes = sorted({".".join(n.split(".")[:2]) + "." if n.startswith("layers.") '
    'else n.split(".")[0] + "." for n, _ in weights})\n'
    f'            print(f"{TAG} probe=draft-keys checkpoint_keys={{len(weights)}} '
    "prefixes=[{';'.join(_doctor_prefixes)}] "
    "untouched=[{';'.join(_doctor_untouched)}]\", flush=True)\n"
    "            return loaded\n"
    "\n"
    "        loader.load_weights = _doctor_then_report\n"
    "        loader.load_weights(")

_REAL_VOCAB = _patch(
    "doctor-vocab-real", _DRAFT, "target_vocab_size = vllm_config.model_config.get_vocab_size()", "insert_after",
    f'print(f"{TAG} probe=vocab target_vocab={{target_vocab_size}} draft_config_vocab={{self.config.vocab_size}} '
    'draft_vocab={self.config.draft_vocab_size}", flush=True)\n')

# --- the stand-in (its releases share the loader's first line)
_STANDIN_OPEN_AT = "def load_weights(self, weights) -> Draft:"
_STANDIN_LOAD = _patch(
    "doctor-draft-load-standin", _DRAFT, _STANDIN_OPEN_AT, "replace",
    _STANDIN_OPEN_AT + "\n"
    "        weights = list(weights)\n"
    + _fc("getattr(self, 'fc_input_size', '-')") + _D2T.rstrip("\n"))

_READS_LOAD = "the checkpoint's fc against the engine's; d2t against t2d"
_READS_KEYS = "the draft parameters the engine's loader left untouched"
PROBES = Probes(
    (
        Probe("hidden-width", "the hidden-state width reaching the draft, against its fc input width", (_REAL_WIDTH,)),
        Probe("draft-keys", f"{_READS_LOAD}; {_READS_KEYS}", (_REAL_OPEN, _REAL_CLOSE)),
        Probe("draft-load", _READS_LOAD, (_STANDIN_LOAD,)),
        Probe("vocab", "the target's vocabulary against the draft config's", (_REAL_VOCAB,)),
    ),
    "speculative_method", ("eagle",), "eagle3", no_capture_patch,
)
