"""The words of alerting, in one place: condition kinds, incident events and the states of a
notification's delivery. Pure.

A notification goes

    pending ──claim──▶ sending ──▶ sent
       ▲                  │
       └──(failed, backoff)┤
                          └──▶ given_up   (max attempts spent)

and a claim whose lease expired (its sender crashed mid-send) is claimable again, so a send
is at least once: receivers dedupe on the notification id (`webhook-id`).
"""

from __future__ import annotations

# Conditions (an incident's kind). Not run statuses: a dead-lettered run opens a
# `dead_letter` incident.
DEAD_LETTER = "dead_letter"
FAILURES = "failures"
MISSED = "missed"
KINDS = (DEAD_LETTER, FAILURES, MISSED)

# What a notification says about its incident.
OPENED = "opened"
RESOLVED = "resolved"
EVENTS = (OPENED, RESOLVED)

# A notification's delivery.
PENDING = "pending"
SENDING = "sending"
SENT = "sent"
GIVEN_UP = "given_up"
DELIVERY_STATES = (PENDING, SENDING, SENT, GIVEN_UP)

# Channel kinds.
WEBHOOK = "webhook"
EMAIL = "email"
CHANNEL_KINDS = (WEBHOOK, EMAIL)


def backoff_seconds(attempt: int, *, initial: float, maximum: float) -> float:
    """The wait after the `attempt`-th failed delivery: initial, doubling, capped."""
    return min(initial * 2 ** max(attempt - 1, 0), maximum)
