"""Helpers the test files share: the `orch` command run from a test (support.cli, the suite's one
`orch()`), the controller killed at a write boundary (support.crashing), file snapshots
(support.files), experiment and store builders (support.specs), draft checkpoints (support.drafts),
the demo's launch script rendered (support.scripts), the bad-input corpus's projects
(support.corpus), processes on this machine (support.processes), checkpoint pushes (support.push),
the Slurm cluster (support.cluster) and orch's modules read with ast (support.modules).
Test files import these, never each other (test_test_suite.py checks it); shared fixtures are in
tests/conftest.py."""
