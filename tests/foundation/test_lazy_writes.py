"""Writes whose loss costs nothing skip the WAL flush, but never weaken a transaction
around them: the caller's commit stays durable."""

from __future__ import annotations

from django.db import connection, transaction

from core.sql import without_waiting_for_disk


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_a_lazy_write_alone_commits_without_waiting_and_leaves_the_session_as_it_was(live):
    with without_waiting_for_disk():
        assert _synchronous_commit() == "off"
    assert _synchronous_commit() == "on"


def test_a_lazy_write_inside_a_transaction_leaves_its_commit_durable(live):
    with transaction.atomic():
        with without_waiting_for_disk():
            assert _synchronous_commit() == "on"
        assert _synchronous_commit() == "on"
