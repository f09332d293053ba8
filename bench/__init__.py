"""`make bench`: the queue's and the worker's speed, beside PGQueuer and procrastinate.

Prints one table and writes bench/results.json; asserts nothing. Run with
`python -m bench` (see bench/__main__.py); sizes come from `BENCH_*`
variables (bench/config.py), `BENCH_PEERS=1` adds the peers (the `bench`
extra), and `BENCH_DATABASE_URL` runs against an existing, empty database
instead of a throwaway server.
"""
