"""Moved to `testbed/pg_binaries.py` (shared with the benchmark); this alias keeps
`tests.pg_binaries` importable for branches written before the move."""

import sys

import testbed.pg_binaries

sys.modules[__name__] = testbed.pg_binaries
