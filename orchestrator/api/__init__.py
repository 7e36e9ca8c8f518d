"""The modules of the library face, one noun each: `orchestrator/__init__.py` re-exports their
functions (`orchestrator.list_runs` is `orchestrator.api.records.list_runs`), each loaded on first
use. A caller imports `orchestrator`; the command line renders what these return."""
