"""URLs of the public site: operators' admin, health probes, the API, a start page."""

from django.contrib import admin
from django.urls import include, path, re_path

from . import console, health, pages
from .api.views import ApiNotFoundView
from .metrics.views import metrics

admin.site.site_header = "Tickwork operations"
admin.site.site_title = "Tickwork admin"

urlpatterns = [
    # The operator console's own pages, inside admin (staff only).
    path("admin/fleet/", admin.site.admin_view(console.fleet_health), name="console-fleet"),
    path(
        "admin/console/<slug:slug>/jobs/",
        admin.site.admin_view(console.tenant_jobs),
        name="console-tenant-jobs",
    ),
    path(
        "admin/console/<slug:slug>/runs/",
        admin.site.admin_view(console.tenant_runs),
        name="console-tenant-runs",
    ),
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include("scheduler_site.api.urls")),
    # Other paths under /api (no version, another version): problem+json, not a page.
    re_path(r"^api(/|$)", ApiNotFoundView.as_view(), name="api-not-found"),
    path("", pages.public_home, name="public-home"),
    # Any other path: a helpful page, also with DEBUG on (never Django's debug 404).
    re_path(r"^", pages.public_not_found, name="public-not-found"),
]

handler404 = "scheduler_site.pages.public_not_found"
