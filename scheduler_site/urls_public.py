"""URLs of the public site: operators' admin, health probes (and the API, later)."""

from django.contrib import admin
from django.urls import include, path

from . import health

admin.site.site_header = "Tickwork operations"
admin.site.site_title = "Tickwork admin"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("api/v1/", include("scheduler_site.api.urls")),
]
