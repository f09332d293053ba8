"""`make bench`: throughput and latency of the job queue and the analysis worker.

Prints figures, asserts nothing. Run with `python -m bench` (see bench/__main__.py);
`BENCH_DATABASE_URL` runs it against an existing, empty database instead of a
throwaway server, and `BENCH_QUICK=1` makes a small smoke run.
"""
