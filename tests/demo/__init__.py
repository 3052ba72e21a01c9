"""The demos' parts: SimPay, the loopback payment provider with its ground-truth ledger (issue 12)."""
