"""Receipts' evidence: sealing and integrity verification, semantic comparison, the release gate."""
