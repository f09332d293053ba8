"""Real servers on 127.0.0.1 that the tests and the benchmark both start: the
Postgres binaries, PgBouncer, and the scripted OpenAI-compatible vision server.
Not part of the installed package."""
