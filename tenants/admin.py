from django.contrib import admin

from .models import ApiToken, Domain, Tenant


class DomainInline(admin.TabularInline):
    model = Domain
    extra = 0


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "schema_name", "weight", "max_concurrency", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("schema_name", "created_at")
    inlines = [DomainInline]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("tenant", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    readonly_fields = ("tenant", "prefix", "digest", "created_at", "last_used_at")
    fields = ("tenant", "name", "prefix", "digest", "created_at", "last_used_at", "revoked_at")

    def has_add_permission(self, request) -> bool:
        return False  # tokens are issued by `issue_token` or the dashboard, which show them once
