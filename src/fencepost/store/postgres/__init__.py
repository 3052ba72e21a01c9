"""PostgreSQL control store: many machines, SKIP LOCKED claims, the server's clock rules leases."""
