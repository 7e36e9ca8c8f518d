"""orch: run LLM-serving experiments on GPU hosts over SSH and keep an exact record of each run."""

__version__ = "0.1.0"
