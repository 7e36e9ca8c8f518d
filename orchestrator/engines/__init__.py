"""What orch knows about serving engines; one subpackage per engine."""
