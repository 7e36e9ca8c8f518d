"""The run's preflight, whatever the engine: its findings stored with the run and reported, its
errors stopping the run (exit 2) before any patch or launch unless the experiment allows their
code (`preflight: {allow: [...]}`)."""

from __future__ import annotations

from orchestrator.engines.finding import Finding, blocking
from orchestrator.errors import PreflightError
from orchestrator.store.rowid import stored_id
from .attempt import Attempt


async def gate(attempt: Attempt) -> None:
    """Findings stored and reported; errors raise, except those the experiment allows (still
    reported and stored, marked allowed)."""
    from orchestrator.store.database import FindingRow
    spec, plan, store, run = attempt.spec, attempt.plan, attempt.store, attempt.run
    if not spec.preflight:
        store.event(run, "preflight-skipped", "orch run --no-preflight: checkpoint checks skipped")
        attempt.say("preflight skipped (--no-preflight)")
        return
    findings = await attempt.engine.preflight(attempt.session.reading(), attempt.launch.command, attempt.launch.env, plan.patches,
                                              None, plan.allow)
    run_id = stored_id(run)
    store.add(*(FindingRow(run_id=run_id, severity=f.severity, code=f.code, what=f.what, why=f.why, fix=f.fix,
                           allowed=f.allowed) for f in findings))
    for f in findings:
        attempt.say(described(f))
    stop_on_errors(findings, plan.allow, attempt.label)
    allowed = sum(f.allowed for f in findings)
    store.event(run, "preflight", f"{len(findings)} finding(s), no errors" if not allowed else
                f"{len(findings)} finding(s), {allowed} allowed error(s) ({', '.join(plan.allow)})")


def described(finding: Finding) -> str:
    """A finding as a run (or its dry run) reports it: `preflight SEVERITY: what`, then why and fix."""
    return (f"preflight {finding.severity.upper()}{' (allowed)' if finding.allowed else ''}: {finding.what}\n"
            f"why: {finding.why}\nfix: {finding.fix}")


def stop_on_errors(findings: list[Finding], allow: tuple[str, ...], label: str) -> None:
    """Raise, naming the first, when an error is not in `allow`."""
    bad = blocking(findings, allow)
    if bad:
        raise PreflightError(f"preflight: {len(bad)} error(s) in the checkpoints of {label}: {bad[0].what}; "
                             f"fix: {bad[0].fix} (`orch run --no-preflight` runs anyway)")
