from django.contrib import admin

from .models import ApiToken

# The Tenant admin (provisioning, suspension, drill-down) is in scheduler_site/admin.py: it
# writes to the tenants' audit logs, which belong to a layer above this app.


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("tenant", "name", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("tenant",)
    readonly_fields = ("tenant", "prefix", "digest", "created_at", "last_used_at")
    fields = ("tenant", "name", "prefix", "digest", "created_at", "last_used_at", "revoked_at")

    def has_add_permission(self, request) -> bool:
        return False  # tokens are issued by `issue_token` or the portal, which show them once
