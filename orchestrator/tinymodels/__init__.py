"""Tiny real models made by orch's own code, without a model hub: a small Llama target trained on a
synthetic context-dependent language, an EAGLE-3 draft trained on the target's own hidden states, and
fault copies of both. Run it with the real engine's virtual environment (it needs torch, transformers,
tokenizers and safetensors):

    PYTHONPATH=<checkout> <venv>/bin/python -m orchestrator.tinymodels --out DIR

Nothing else in orch imports this package: it is a maker of test fixtures, not part of a run.
"""
