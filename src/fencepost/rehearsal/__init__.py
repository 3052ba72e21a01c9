"""Plugin delivery rehearsal: packages, sandboxes, the six scenarios, the Attempt handler and service."""
