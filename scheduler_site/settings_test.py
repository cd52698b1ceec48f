"""Settings for the test suite: its own database (`test_<name>`) and its own Redis DB."""

import os
from urllib.parse import urlsplit, urlunsplit

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("SCHEDULER_MIN_INTERVAL_SECONDS", "1")
TEST_REDIS_DB = int(os.environ.get("TEST_REDIS_DB", "15"))


def _redis_url_with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


os.environ["REDIS_URL"] = _redis_url_with_db(
    os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), TEST_REDIS_DB
)
os.environ.pop("CELERY_BROKER_URL", None)

from .settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed, tests only
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
