"""The wheel test builds and installs the package (a minute or so): it runs in
`make test-wheel` (which sets WHEEL_TEST=1), not in `make test`."""

import os

collect_ignore_glob = [] if os.environ.get("WHEEL_TEST") == "1" else ["test_*.py"]
