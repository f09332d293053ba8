"""Moved to `testbed/pgbouncer.py` (shared with the benchmark); this alias keeps
`tests.pgbouncer` importable for branches written before the move."""

import sys

import testbed.pgbouncer

sys.modules[__name__] = testbed.pgbouncer
