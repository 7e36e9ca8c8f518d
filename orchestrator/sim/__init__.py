"""The rehearsal host: a CPU stand-in for SGLang that orch copies to hosts (never imported by orch)."""
