from django.db import models


class SchedulerLease(models.Model):
    """The fencing record: one row whose epoch grows by one at every change of leader.

    A leader checks `epoch = mine` with FOR SHARE inside every transaction that writes
    schedule state; a new leader's bump waits for those transactions and then makes the
    old leader's later writes fail (invariant 3, docs/invariants.md).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    epoch = models.BigIntegerField(default=0)
    holder = models.CharField(max_length=200, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    renewed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"epoch {self.epoch} held by {self.holder or 'nobody'}"
