"""Resident shells: one long-lived bash per SSH channel runs many commands (`remote/resident.py`)."""

from __future__ import annotations

from .quoting import quote

RESIDENT_READY = "orch-resident-ready"
RESIDENT_GO = "go\n"


def resident_shell() -> str:
    """The channel's command: a bash reading its commands from stdin (SHLVL=2, as `in_bash`)."""
    return "SHLVL=2 exec bash -s"


def resident_setup() -> str:
    """What the resident bash reads first: `__orch TAG COMMAND N [held]` runs COMMAND (an `in_bash`
    string) under its own bash, its stdin the N bytes that follow the line (none for N < 0), and
    prints `TAG STATUS OUT_BYTES ERR_BYTES`, then its stdout and stderr. `held`: it first answers
    `TAG held` and runs the command only once a line `go` follows (so a link lost before then ran
    nothing: what an exec channel that never opened promises). A TERM to the resident bash passes
    to the command (the controller gave up on it), as on an exec channel."""
    return r"""__orch_d=$(mktemp -d) || exit 1
trap 'rm -rf -- "$__orch_d"' EXIT
trap '[ -n "$__orch_pid" ] && kill -TERM "$__orch_pid" 2>/dev/null' TERM
__orch() {
  local i=/dev/null o="$__orch_d/o" e="$__orch_d/e" rc no ne
  if [ "$3" -ge 0 ]; then i="$__orch_d/i"; head -c "$3" >"$i"; fi
  if [ "$4" = held ]; then printf '%s held\n' "$1"; read -r go || exit 0; [ "$go" = go ] || exit 1; fi
  bash -c "$2" <"$i" >"$o" 2>"$e" & __orch_pid=$!
  wait "$__orch_pid"; rc=$?; __orch_pid=
  no=$(wc -c <"$o"); ne=$(wc -c <"$e")
  printf '%s %s %s %s\n' "$1" "$rc" $no $ne
  head -c "$no" "$o"; head -c "$ne" "$e"
  rm -f -- "$o" "$e" "$__orch_d/i"
}
echo """ + RESIDENT_READY + "\n"


def resident_call(tag: str, command: str, input_bytes: int, held: bool) -> str:
    """One command line for the resident bash (`resident_setup`); -1 bytes: no stdin."""
    return f"__orch {tag} {quote(command)} {int(input_bytes)}{' held' if held else ''}\n"
