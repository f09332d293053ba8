"""Retry delays: exponential in the attempt number, capped, with a ±20 % jitter."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Final

BACKOFF_FIRST_SECONDS: Final = 60
"""Delay after the first failed attempt."""
BACKOFF_CAP_SECONDS: Final = 3600
"""No retry waits longer than an hour."""
BACKOFF_MAX_EXPONENT_ATTEMPTS: Final = 21
"""Attempts are clamped here so 2**(attempts-1) stays small."""


def backoff_base(attempts: int) -> timedelta:
    """60 s × 2^(attempts−1), attempts clamped to [1, 21], capped at 3600 s."""
    clamped = min(max(attempts, 1), BACKOFF_MAX_EXPONENT_ATTEMPTS)
    seconds = BACKOFF_FIRST_SECONDS * 2 ** (clamped - 1)
    return timedelta(seconds=min(seconds, BACKOFF_CAP_SECONDS))


def apply_jitter(base: timedelta, jitter: float) -> timedelta:
    """Scale `base` by 0.8 + 0.4 × clamp(jitter, 0, 1), rounded to whole seconds."""
    multiplier = 0.8 + 0.4 * min(max(jitter, 0.0), 1.0)
    return timedelta(seconds=round(base.total_seconds() * multiplier))


def backoff_for(attempts: int, draw: Callable[[], float] = random.random) -> timedelta:
    """The jittered delay before retrying a job that has failed `attempts` times."""
    return apply_jitter(backoff_base(attempts), draw())
