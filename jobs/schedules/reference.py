"""The croniter bridge: the project's only import of croniter.

Production matching is done by :mod:`.match` (microseconds, standard cron semantics);
croniter is kept as an independent reference to cross-check it (see the property tests).
Known croniter 7 divergences, avoided by the cross-check: an equal range such as ``3-3``
means the whole field in croniter (standard cron, and this package: the single value 3),
and croniter treats a full-but-not-``*`` day field (``1-31``, ``*/1``, ``0-6``) as restricted
when the other day field has no ``*`` (this package: a full day field never restricts).
"""

from __future__ import annotations

from datetime import datetime

from croniter import croniter


def croniter_next(expression: str, wall: datetime) -> datetime:
    """croniter's next match strictly after the naive wall-clock time ``wall``."""
    return croniter(expression, wall).get_next(datetime)
