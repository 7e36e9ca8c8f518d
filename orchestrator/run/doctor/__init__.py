"""`orch doctor`: from a low accept length to a named, confirmed cause.

The experiment's variant runs again with probe patches each engine writes for its releases
(`engines/<engine>/probes.py`, behind `engines/probe.py`); the recorded evidence (`evidence`) is read
by an ordered table of rules (`causes`), and the cause's fix (`fixes`: a param, a patch, a checkpoint
transform) runs to confirm it (`examination`). docs/doctor.md lists every probe and cause code."""
