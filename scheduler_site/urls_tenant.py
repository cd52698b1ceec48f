"""URLs of a tenant's domain: the portal, the API and health probes."""

from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from . import health, pages
from .api.views import ApiNotFoundView

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("api/v1/", include("scheduler_site.api.urls")),
    # Other paths under /api (no version, another version): problem+json, not a page.
    re_path(r"^api(/|$)", ApiNotFoundView.as_view(), name="api-not-found"),
    path("", include("portal.urls")),
    re_path(r"^", pages.tenant_not_found, name="tenant-not-found"),
]

handler404 = "scheduler_site.pages.tenant_not_found"
