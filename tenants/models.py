from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django_tenants.models import DomainMixin, TenantMixin
from django_tenants.utils import get_public_schema_name, schema_exists

# Bounds of a tenant's run retention (days): a day at least, ten years at most.
RETENTION_MIN_DAYS = 1
RETENTION_MAX_DAYS = 3650


class Tenant(TenantMixin):
    """A customer: one PostgreSQL schema holds its users, jobs and runs."""

    slug = models.SlugField(max_length=40, unique=True)
    name = models.CharField(max_length=200)
    weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    max_concurrency = models.PositiveIntegerField(default=100, validators=[MinValueValidator(1)])
    created_at = models.DateTimeField(auto_now_add=True)
    # Days the tenant's ended runs are kept (beat/retention.py prunes older ones); empty:
    # the fleet's RUN_RETENTION_DAYS.
    run_retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(RETENTION_MIN_DAYS), MaxValueValidator(RETENTION_MAX_DAYS)],
        help_text=(
            f"Days ended runs are kept ({RETENTION_MIN_DAYS}-{RETENTION_MAX_DAYS}); empty: "
            "the default (RUN_RETENTION_DAYS). Dead runs stay until replayed or discarded."
        ),
    )
    # Set by an operator (tenants.services.tenant_suspend): the leader fires none of the
    # tenant's jobs, its API answers 403 and its portal a page saying so.
    suspended_at = models.DateTimeField(null=True, blank=True)
    suspended_reason = models.CharField(max_length=500, blank=True, default="")
    # The Standard Webhooks signing secret of its HTTP deliveries (tenants/signing.py), a
    # Fernet token under TICKWORK_SECRET_KEYS; during a rotation's overlap the previous one
    # signs too, until `signing_secret_previous_expires_at`. The version moves at every
    # change, so that workers know when their cached copy is stale.
    signing_secret = models.TextField(blank=True, default="", db_default="")
    signing_secret_created_at = models.DateTimeField(null=True, blank=True)
    signing_secret_previous = models.TextField(blank=True, default="", db_default="")
    signing_secret_previous_expires_at = models.DateTimeField(null=True, blank=True)
    signing_secret_version = models.PositiveIntegerField(default=0, db_default=0)

    auto_create_schema = True
    auto_drop_schema = False

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def create_schema(
        self, check_if_exists: bool = False, sync_schema: bool = True, verbosity: int = 1
    ) -> bool:
        """Clone the template schema when it is current (tenants/schema_template.py), else
        run the migrations as django-tenants does. Called by save() for a new tenant, in
        the caller's transaction."""
        from .schema_template import schema_create_from_template

        if sync_schema and self.schema_name != get_public_schema_name():
            if check_if_exists and schema_exists(self.schema_name):
                return False
            if schema_create_from_template(self.schema_name):
                return True
        super().create_schema(
            check_if_exists=check_if_exists, sync_schema=sync_schema, verbosity=verbosity
        )
        return True

    @property
    def suspended(self) -> bool:
        return self.suspended_at is not None


class Domain(DomainMixin):
    def __str__(self) -> str:
        return self.domain


class ApiToken(models.Model):
    """A tenant-scoped API token. Only a SHA-256 digest of the secret is stored.

    Tokens are 256-bit random strings, so a fast digest is enough: a slow password hash
    protects low-entropy secrets, and would cost a hash per API request for nothing.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, default="default")
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.tenant.slug}:{self.prefix}…"
