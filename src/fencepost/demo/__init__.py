"""Self-verifying demonstrations a new user runs from the README (``fencepost demo payments``): a real local
payment provider on loopback with a ground-truth ledger, real worker subprocesses, and a table of verdicts
checked against what the provider really did."""
