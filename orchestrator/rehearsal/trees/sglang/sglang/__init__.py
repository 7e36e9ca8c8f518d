"""Rehearsal stand-in for the SGLang serving runtime: CPU-only, numpy-backed."""

__version__ = "0.5.23"
