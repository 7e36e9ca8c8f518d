"""SGLang: its log lines (`logs`, `diagnosis`), its flags (`flags`), EAGLE-3 draft checks
(`preflight`) and `engine.SglangEngine`, the seam the run uses (its rehearsal stand-in lives in
`orchestrator.rehearsal`)."""

PACKAGE = "sglang"
# `_version.py` is written at build time since about 0.5.9, when `version.py` holds only a
# `0.0.0.dev0` fallback
VERSION_FILES = ("_version.py", "version.py")
