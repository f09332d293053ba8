"""What lets the lease loop lease: the readiness gate (the analyzer and the store are up)
and the breakers (a kind whose jobs all fail the same way)."""
