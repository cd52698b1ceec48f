"""URLs of the public site: operators' admin, health probes, the API, a start page."""

from django.contrib import admin
from django.urls import include, path, re_path

from . import health, pages

admin.site.site_header = "Tickwork operations"
admin.site.site_title = "Tickwork admin"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("api/v1/", include("scheduler_site.api.urls")),
    path("", pages.public_home, name="public-home"),
    # Any other path: a helpful page, also with DEBUG on (never Django's debug 404).
    re_path(r"^", pages.public_not_found, name="public-not-found"),
]
