"""Helpers the test files share: the `orch` command run from a test (support.cli), file snapshots
(support.files), experiment and store builders (support.specs), the bad-input corpus's projects
(support.corpus), processes on this machine (support.processes) and checkpoint pushes (support.push).
Test files import these, never each other; shared fixtures are in tests/conftest.py."""
