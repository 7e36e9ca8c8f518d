"""What `orch ls` lists lives on the library face (orchestrator/api/listing.py); these names stay
reachable here for callers of the command's own module."""

from orchestrator.api.listing import as_csv, check, identity, json_listing, json_text, select

__all__ = ["as_csv", "check", "identity", "json_listing", "json_text", "select"]
