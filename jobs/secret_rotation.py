"""Re-encrypting the secret header values of the current tenant schema's jobs with the
newest key (`manage.py rotate_secrets`), in batches, each batch one short transaction.

Only rows holding a secret value are read (a jsonb path test), in id order; each batch's
rows are locked (an edit of one of them waits a batch at most) and written back only if a
value was not under the newest key yet, so running it again changes nothing. Deleted jobs
are included: their rows still hold sealed values.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from core.encryption import Keyring, UnsealError

from .headers import reseal_headers
from .models import Job

HAS_SECRET_HEADER = RawSQL(
    "jsonb_path_exists(target, '$.headers.* ? (@.secret == true)')",
    (),
    output_field=BooleanField(),
)


class UnopenableSecret(Exception):
    """A stored value that no configured key opens; the message says which, not what."""


@dataclass
class ResealCount:
    jobs: int = 0  # rows rewritten
    values: int = 0  # secret values re-encrypted
    current: int = 0  # rows whose values were all under the newest key already


def job_secrets_reseal(*, ring: Keyring, schema: str, batch_size: int = 500) -> ResealCount:
    count, last_id = ResealCount(), 0
    while True:
        with transaction.atomic():
            rows = list(
                Job.objects.select_for_update()
                .alias(has_secret=HAS_SECRET_HEADER)
                .filter(has_secret=True, id__gt=last_id)
                .order_by("id")
                .only("id", "target")[:batch_size]
            )
            for job in rows:
                _reseal_job(job, ring, schema, count)
        if len(rows) < batch_size:
            return count
        last_id = rows[-1].id


def _reseal_job(job: Job, ring: Keyring, schema: str, count: ResealCount) -> None:
    try:
        headers, resealed = reseal_headers(job.target.get("headers") or {}, ring)
    except UnsealError:
        raise UnopenableSecret(
            f"{schema}: job {job.id} holds a secret header value that no key in "
            "TICKWORK_SECRET_KEYS opens (keep the old key in the list until rotate_secrets "
            "has run)"
        ) from None
    if not resealed:
        count.current += 1
        return
    # A queryset update: a key rotation is no edit (no audit event, updated_at unchanged).
    Job.objects.filter(pk=job.pk).update(target={**job.target, "headers": headers})
    count.jobs += 1
    count.values += resealed
