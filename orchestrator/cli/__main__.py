"""`python -m orchestrator.cli ...`, the same as `orch ...`."""

from . import main

main()
