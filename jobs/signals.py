"""Signals that let execution react to job changes without jobs knowing about runs.

All are sent inside the editing transaction, with the job row locked, so a receiver's
writes commit or roll back with the edit (runs/receivers.py connects them).
"""

from __future__ import annotations

from django.dispatch import Signal

# A job's schedule fields changed: kwargs `job` (as edited, `next_run_at` recomputed) and
# `now`. Runs already materialised for slots after `now` must match the new schedule.
schedule_changed = Signal()

# A job was soft-deleted: kwargs `job` and `now`. Its runs waiting for admission must not
# fire.
job_deleted = Signal()

# A paused job was resumed: kwargs `tenant`, `job` and `now`. Its dependency runs, held
# while it was paused (their DAG run waits for them), go to admission.
job_resumed = Signal()
