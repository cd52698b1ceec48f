"""The operator console's tenant admin: create (provisions schema, domain, first admin and
a token via `tenant_provision`), edit quota, weight and run retention, suspend and resume
(audited in the tenant's own audit log), links to fleet health and to the tenant's jobs and runs."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html
from django_tenants.utils import schema_context

from core.clock import SystemClock
from jobs.services import audit_record
from tenants.models import Domain, Tenant
from tenants.services import (
    ProvisioningError,
    check_provisioning,
    default_domain_for,
    retention_days_of,
    tenant_provision,
    tenant_resume,
    tenant_suspend,
)

from .console import operator_actor


class DomainInline(admin.TabularInline):
    model = Domain
    extra = 0


class TenantProvisionForm(forms.ModelForm):
    domain = forms.CharField(required=False, help_text="Default: <slug>.localhost")
    admin_user = forms.CharField(initial="admin", help_text="The tenant's first admin.")
    admin_password = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Empty: a random one, shown once after saving.",
    )

    class Meta:
        model = Tenant
        fields = ("slug", "name", "weight", "max_concurrency")

    def clean(self) -> dict:
        data = super().clean()
        slug = data.get("slug") or ""
        domain = data.get("domain") or default_domain_for(slug)
        try:
            check_provisioning(slug, domain, data.get("admin_user") or "")
        except ProvisioningError as exc:
            raise forms.ValidationError(str(exc)) from None
        data["domain"] = domain
        return data


def _audit(tenant: Tenant, request, action: str, changes: dict) -> None:
    with schema_context(tenant.schema_name):
        audit_record(actor=operator_actor(request), action=action, changes=changes)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = (
        "slug",
        "name",
        "state",
        "weight",
        "max_concurrency",
        "retention",
        "drill_down",
        "created_at",
    )
    list_filter = (("suspended_at", admin.EmptyFieldListFilter),)
    search_fields = ("slug", "name")
    readonly_fields = ("schema_name", "created_at", "suspended_at", "suspended_reason")
    fields = (
        "slug",
        "name",
        "schema_name",
        "weight",
        "max_concurrency",
        "run_retention_days",
        "suspended_at",
        "suspended_reason",
        "created_at",
    )
    actions = ("suspend_tenants", "resume_tenants")

    def get_queryset(self, request):
        return super().get_queryset(request).exclude(schema_name="public")

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = TenantProvisionForm
            kwargs["fields"] = (
                "slug",
                "name",
                "domain",
                "admin_user",
                "admin_password",
                "weight",
                "max_concurrency",
            )
        return super().get_form(request, obj, change=change, **kwargs)

    def get_changeform_initial_data(self, request) -> dict:
        """A new tenant's quota and weight start at the configured defaults (as with
        `provision_tenant`), not the model's column defaults."""
        return {
            "max_concurrency": settings.SCHEDULER_TENANT_DEFAULT_MAX_CONCURRENCY,
            "weight": settings.SCHEDULER_TENANT_DEFAULT_WEIGHT,
            **super().get_changeform_initial_data(request),
        }

    def get_fields(self, request, obj=None):
        if obj is None:
            return (
                "slug",
                "name",
                "domain",
                "admin_user",
                "admin_password",
                "weight",
                "max_concurrency",
            )
        return self.fields

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return (*self.readonly_fields, "slug")

    def get_inlines(self, request, obj):
        return [DomainInline] if obj is not None else []

    def save_model(self, request, obj, form, change):
        if change:
            before = Tenant.objects.get(pk=obj.pk)
            super().save_model(request, obj, form, change)
            diff = {
                key: [getattr(before, key), getattr(obj, key)]
                for key in ("name", "weight", "max_concurrency", "run_retention_days")
                if getattr(before, key) != getattr(obj, key)
            }
            if diff:
                _audit(obj, request, "tenant_update", {"diff": diff})
            return
        data = form.cleaned_data
        result = tenant_provision(
            slug=data["slug"],
            domain=data["domain"],
            name=data.get("name") or data["slug"],
            admin_user=data["admin_user"],
            admin_password=data.get("admin_password") or None,
            weight=data["weight"],
            max_concurrency=data["max_concurrency"],
        )
        obj.pk, obj.schema_name = result.tenant.pk, result.tenant.schema_name
        obj.created_at = result.tenant.created_at
        _audit(result.tenant, request, "tenant_create", {"domain": result.domain})
        messages.warning(
            request,
            f"Tenant {result.tenant.slug} provisioned: portal http://{result.domain}/ — "
            f"admin {result.admin_user} / {result.admin_password} — API token "
            f"{result.token.plain} (shown only this once; store them now).",
        )

    def save_related(self, request, form, formsets, change):
        if change:
            super().save_related(request, form, formsets, change)

    @admin.display(description="state")
    def state(self, tenant: Tenant) -> str:
        if tenant.suspended_at:
            return format_html(
                '<strong style="color:#a31a12">suspended</strong> {}',
                f"{tenant.suspended_at:%Y-%m-%d %H:%M}",
            )
        return "active"

    @admin.display(description="runs kept")
    def retention(self, tenant: Tenant) -> str:
        days = retention_days_of(tenant)
        kept = f"{days} days" if days else "for ever"
        return kept if tenant.run_retention_days is not None else f"{kept} (default)"

    @admin.display(description="drill-down")
    def drill_down(self, tenant: Tenant) -> str:
        return format_html(
            '<a href="{}">jobs</a> · <a href="{}">runs</a>',
            reverse("console-tenant-jobs", args=[tenant.slug]),
            reverse("console-tenant-runs", args=[tenant.slug]),
        )

    @admin.action(description="Suspend the selected tenants (their jobs stop firing)")
    def suspend_tenants(self, request, queryset):
        now = SystemClock().now()
        reason = f"suspended by {operator_actor(request).label}"
        done = 0
        for tenant in queryset:
            if tenant_suspend(tenant=tenant, reason=reason, now=now):
                _audit(tenant, request, "tenant_suspend", {"reason": reason})
                done += 1
        self.message_user(request, f"{done} tenant(s) suspended.", messages.WARNING)

    @admin.action(description="Resume the selected tenants")
    def resume_tenants(self, request, queryset):
        done = 0
        for tenant in queryset:
            if tenant_resume(tenant=tenant):
                _audit(tenant, request, "tenant_resume", {})
                done += 1
        self.message_user(request, f"{done} tenant(s) resumed.", messages.SUCCESS)
