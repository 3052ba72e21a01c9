"""Workflow definitions, plans, and their atomic admission (ADR-0224)."""
