"""The rehearsal vLLM: a CPU stand-in for vLLM's OpenAI server (see the README beside this tree)."""
