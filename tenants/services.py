"""Tenant provisioning: schema, domain, admin user and a first API token."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher, get_hasher, make_password
from django.db import connection, transaction
from django.utils import timezone
from django_tenants.utils import schema_context

from .models import RETENTION_MAX_DAYS, RETENTION_MIN_DAYS, Domain, Tenant
from .schema_template import template_ensure, template_name, template_state
from .signals import tenant_resumed
from .signing import signing_secret_rotate
from .tokens import IssuedToken, token_issue

SLUG_RE = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
DOMAIN_RE = re.compile(rf"^(?=.{{1,253}}$)({_LABEL}\.)*{_LABEL}$")
# A generated first password is 96 random bits: key stretching protects guessable
# passwords, and at the default 1,000,000 PBKDF2 iterations it cost more than the rest of
# provisioning together (0.3 to 1.4 s here). Stored with few iterations, it is hashed again
# at the default cost at the first login (Django upgrades a hash whose iterations differ).
GENERATED_PASSWORD_ITERATIONS = 1000


class ProvisioningError(Exception):
    """A provisioning request that cannot be carried out; the message says what to fix."""


@dataclass(frozen=True)
class ProvisionedTenant:
    tenant: Tenant
    domain: str
    admin_user: str
    admin_password: str
    token: IssuedToken
    signing_secret: str = ""  # the Standard Webhooks secret, shown once (tenants/signing.py)


def schema_name_for(slug: str) -> str:
    # A prefix keeps tenant schemas apart from `public`, `pg_*` and `information_schema`.
    return "t_" + slug.replace("-", "_")


def slug_for_schema(schema: str) -> str:
    """The inverse of schema_name_for (slugs have no underscores), for labels and logs
    of processes that know only the schema; a schema not named that way is returned as is."""
    return schema[2:].replace("_", "-") if schema.startswith("t_") else schema


def default_domain_for(slug: str, base_domain: str = "localhost") -> str:
    return f"{slug}.{base_domain}"


def check_provisioning(slug: str, domain: str, admin_user: str) -> None:
    """ProvisioningError if `tenant_provision` would refuse these (for forms that ask)."""
    _validate(slug, domain.lower(), admin_user)
    _check_clone_possible()


def _check_clone_possible() -> None:
    if not connection.transaction_pooling:
        return
    if not template_name():
        raise ProvisioningError(
            "TENANT_TEMPLATE_SCHEMA is empty, and behind a transaction pool a new schema is"
            " only cloned from the template: set it (and run `manage.py tenant_template` with"
            " a direct DATABASE_URL), or provision with a direct DATABASE_URL"
        )
    if not template_state().current:
        # Behind a transaction pool the template is not built and a schema is not
        # migrated here (both need a session of their own): only a clone will do. (Asked
        # of the template itself: template_ensure says False inside a transaction, as in
        # Django admin's add view, whatever the template's state.)
        raise ProvisioningError(
            "the tenant template is not current, and behind a transaction pool a new schema"
            " is only cloned from it: run `manage.py tenant_template` with a direct"
            " DATABASE_URL (a release step), then provision again"
        )


def _validate(slug: str, domain: str, admin_user: str) -> None:
    if not SLUG_RE.match(slug):
        raise ProvisioningError(
            f"invalid slug {slug!r}: use 2-40 lowercase letters, digits and hyphens, "
            "starting with a letter"
        )
    if Tenant.objects.filter(slug=slug).exists():
        raise ProvisioningError(f"tenant {slug!r} already exists")
    if not DOMAIN_RE.match(domain):
        raise ProvisioningError(f"invalid domain {domain!r}")
    if domain in settings.SCHEDULER_PUBLIC_HOSTS:
        raise ProvisioningError(
            f"domain {domain!r} is the public host (SCHEDULER_PUBLIC_HOSTS): give the tenant "
            f"a domain of its own, e.g. {default_domain_for(slug)!r}"
        )
    if Domain.objects.filter(domain=domain).exists():
        raise ProvisioningError(f"domain {domain!r} already belongs to a tenant")
    if not admin_user or len(admin_user) > 150:
        raise ProvisioningError("admin user name must be 1-150 characters")


def _limits(weight: int | None, max_concurrency: int | None) -> tuple[int, int]:
    """The fair-share weight and run quota, the settings' defaults where not given."""
    weight = settings.SCHEDULER_TENANT_DEFAULT_WEIGHT if weight is None else weight
    if max_concurrency is None:
        max_concurrency = settings.SCHEDULER_TENANT_DEFAULT_MAX_CONCURRENCY
    if weight < 1 or max_concurrency < 1:
        raise ProvisioningError("weight and max concurrency must be at least 1")
    return weight, max_concurrency


# `tenant_set_limits(retention_days=DEFAULT_RETENTION)`: back to the fleet's default.
DEFAULT_RETENTION = "default"


def check_retention_days(days: int) -> int:
    """`days` if it is a retention a tenant may have, else ProvisioningError saying why."""
    if isinstance(days, bool) or not isinstance(days, int):
        raise ProvisioningError(f"retention days must be a whole number, not {days!r}")
    if not RETENTION_MIN_DAYS <= days <= RETENTION_MAX_DAYS:
        raise ProvisioningError(
            f"retention days must be between {RETENTION_MIN_DAYS} and {RETENTION_MAX_DAYS} "
            f"(got {days}); use 'default' for the fleet's RUN_RETENTION_DAYS"
        )
    return days


def retention_days_of(tenant: Tenant) -> int:
    """Days the tenant's ended runs are kept (0: for ever, when the fleet's default is 0
    and the tenant has no value of its own)."""
    if tenant.run_retention_days is not None:
        return tenant.run_retention_days
    return settings.RUN_RETENTION_DAYS


def tenant_set_limits(
    *,
    slug: str,
    weight: int | None = None,
    max_concurrency: int | None = None,
    retention_days: int | str | None = None,
) -> Tenant:
    """Change a tenant's fair-share weight, run quota and run retention (`DEFAULT_RETENTION`
    clears its own); None leaves one as it is. The leader reads the limits again within a
    few seconds and the retention at its next pruning pass (no restart)."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise ProvisioningError(f"no tenant {slug!r}")
    tenant.weight, tenant.max_concurrency = _limits(
        tenant.weight if weight is None else weight,
        tenant.max_concurrency if max_concurrency is None else max_concurrency,
    )
    fields = ["weight", "max_concurrency"]
    if retention_days == DEFAULT_RETENTION:
        tenant.run_retention_days = None
        fields.append("run_retention_days")
    elif retention_days is not None:
        tenant.run_retention_days = check_retention_days(retention_days)
        fields.append("run_retention_days")
    tenant.save(update_fields=fields)
    return tenant


def tenant_provision(
    *,
    slug: str,
    domain: str | None = None,
    name: str | None = None,
    admin_user: str = "admin",
    admin_password: str | None = None,
    weight: int | None = None,
    max_concurrency: int | None = None,
) -> ProvisionedTenant:
    domain = (domain or default_domain_for(slug)).lower()
    _validate(slug, domain, admin_user)
    weight, max_concurrency = _limits(weight, max_concurrency)
    password = admin_password or secrets.token_urlsafe(12)
    encoded = _password_hash(password, generated=not admin_password)
    # Before the transaction: building the template runs migrations, which commit.
    template_ensure()
    _check_clone_possible()
    # Schema DDL is transactional in PostgreSQL: a failure anywhere leaves nothing behind.
    with transaction.atomic():
        tenant = Tenant(
            schema_name=schema_name_for(slug),
            slug=slug,
            name=name or slug,
            weight=weight,
            max_concurrency=max_concurrency,
        )
        tenant.save(verbosity=0)
        Domain.objects.create(domain=domain, tenant=tenant, is_primary=True)
        with schema_context(tenant.schema_name):
            user_model = get_user_model()
            user_model.objects.create(
                username=user_model.normalize_username(admin_user),
                password=encoded,
                is_staff=True,
                is_superuser=True,
            )
        issued = token_issue(tenant=tenant, name="provisioning")
        signing = signing_secret_rotate(tenant=tenant, now=timezone.now(), overlap=timedelta(0))
    return ProvisionedTenant(
        tenant=tenant,
        domain=domain,
        admin_user=admin_user,
        admin_password=password,
        token=issued,
        signing_secret=signing.secret,
    )


def _password_hash(password: str, *, generated: bool) -> str:
    hasher = get_hasher()
    if generated and isinstance(hasher, PBKDF2PasswordHasher):
        return hasher.encode(password, hasher.salt(), iterations=GENERATED_PASSWORD_ITERATIONS)
    return make_password(password)


def tenant_suspend(*, tenant: Tenant, reason: str = "", now: datetime) -> bool:
    """Suspend a tenant: the leader stops firing its jobs (beat/tenant_directory.py leaves
    it out), its API answers 403 and its portal says so. Runs already admitted finish.
    False if it was suspended already (the first suspension's time stays)."""
    changed = Tenant.objects.filter(pk=tenant.pk, suspended_at__isnull=True).update(
        suspended_at=now, suspended_reason=reason[:500]
    )
    tenant.refresh_from_db(fields=["suspended_at", "suspended_reason"])
    return bool(changed)


def tenant_resume(*, tenant: Tenant) -> bool:
    """Lift a suspension. The tenant's schedulable jobs go back into the time index at once
    (`tenant_resumed`; should that write fail, the leader's reconciliation sweep puts each
    due job back within SCHEDULER_RELAY_INTERVAL_SECONDS), and slots missed meanwhile follow
    each job's misfire policy. False if it was not suspended."""
    changed = Tenant.objects.filter(pk=tenant.pk, suspended_at__isnull=False).update(
        suspended_at=None, suspended_reason=""
    )
    tenant.refresh_from_db(fields=["suspended_at", "suspended_reason"])
    if changed:
        tenant_resumed.send(sender=Tenant, tenant=tenant)
    return bool(changed)
