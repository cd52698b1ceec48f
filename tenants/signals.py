"""Signals other apps answer without tenants importing them (tenants sits below jobs)."""

from django.dispatch import Signal

# Sent after a suspension is lifted (kwargs: tenant). jobs/receivers.py writes the tenant's
# schedulable jobs back into the time index, which the leader dropped while suspended.
tenant_resumed = Signal()
