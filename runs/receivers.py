"""Execution's side of job changes (the signals of jobs/signals.py), in the editing
transaction."""

from __future__ import annotations

from django.dispatch import receiver

from jobs.signals import job_deleted, job_resumed, schedule_changed

from . import services


@receiver(schedule_changed, dispatch_uid="runs.schedule_changed")
def _on_schedule_changed(sender, *, job, now, **_) -> None:
    services.runs_follow_schedule_change(job=job, now=now)


@receiver(job_deleted, dispatch_uid="runs.job_deleted")
def _on_job_deleted(sender, *, job, now, **_) -> None:
    services.runs_cancel_for_deleted_job(job=job, now=now)


@receiver(job_resumed, dispatch_uid="runs.job_resumed")
def _on_job_resumed(sender, *, tenant, job, now, **_) -> None:
    services.release_held_dependency_runs(tenant=tenant, job=job)
