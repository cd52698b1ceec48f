"""Retry arithmetic: exponential backoff with a cap and full jitter. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff_seconds: float
    backoff_multiplier: float
    backoff_max_seconds: float
    jitter: bool = True


def backoff_ceiling(policy: RetryPolicy, failed_attempt: int) -> float:
    """The delay before attempt `failed_attempt + 1`, before jitter."""
    exponent = max(failed_attempt - 1, 0)
    try:
        raw = policy.backoff_seconds * policy.backoff_multiplier**exponent
    except OverflowError:
        raw = float("inf")
    return min(raw, policy.backoff_max_seconds)


def retry_delay(
    policy: RetryPolicy, failed_attempt: int, rng: random.Random | None = None
) -> float:
    """Full jitter (uniform in [0, ceiling]) spreads a thundering herd of retries; without
    jitter the delay is the ceiling itself."""
    ceiling = backoff_ceiling(policy, failed_attempt)
    if not policy.jitter:
        return ceiling
    return (rng or random).uniform(0, ceiling)


def should_retry(policy: RetryPolicy, failed_attempt: int) -> bool:
    return failed_attempt < policy.max_attempts
