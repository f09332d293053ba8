"""Moved to `testbed/vision_server.py` (shared with the benchmark); this alias keeps
`tests.vision_server` importable for branches written before the move."""

import sys

import testbed.vision_server

sys.modules[__name__] = testbed.vision_server
