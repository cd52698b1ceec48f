from __future__ import annotations

import subprocess

import pytest

from tests.settings_process import CHECK, run_django


def _django_setup(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    return run_django(env_overrides, drop=("SECRET_KEY", "DEBUG", "TICKWORK_SECRET_KEYS"))


def test_production_refuses_the_development_secret_key():
    result = _django_setup({"DEBUG": "0"})
    assert result.returncode != 0
    assert "SECRET_KEY is the development key" in result.stderr


FERNET_KEY = "w5mZ1p9c4Yq0u8ZlWm3b8Kk6r7p5m2Hk4p0bH3nqL1A="


def test_production_starts_with_a_real_secret_key():
    keys = {"TICKWORK_SECRET_KEYS": FERNET_KEY}
    result = _django_setup({"DEBUG": "0", "SECRET_KEY": "x" * 50, **keys})
    assert result.returncode == 0, result.stderr


def test_production_refuses_to_start_without_secret_keys():
    result = _django_setup({"DEBUG": "0", "SECRET_KEY": "x" * 50})
    assert result.returncode != 0
    assert "TICKWORK_SECRET_KEYS is not set" in result.stderr


def test_a_bad_secret_key_is_named_by_position_and_never_printed():
    bad = "not-a-fernet-key-but-a-password"
    keys = {"TICKWORK_SECRET_KEYS": f"{FERNET_KEY},{bad}"}
    result = _django_setup({"DEBUG": "0", "SECRET_KEY": "x" * 50, **keys})
    assert result.returncode != 0
    assert "TICKWORK_SECRET_KEYS entry 2 is not a Fernet key" in result.stderr
    assert bad not in result.stderr


def test_development_derives_a_key_from_secret_key():
    code = "import django; django.setup(); from django.conf import settings; " + (
        "print(settings.TICKWORK_SECRET_KEYS)"
    )
    out = run_django(
        {"DEBUG": "1", "SECRET_KEY": "s" * 40}, ["-c", code], drop=("TICKWORK_SECRET_KEYS",)
    )
    from core.encryption import derived_dev_key

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == repr([derived_dev_key("s" * 40)])


def test_manage_py_reports_a_bad_setting_in_one_line():
    result = run_django(
        {"SECRET_KEY": "x" * 50, "DEBUG": "0", "TICKWORK_SECRET_KEYS": "short"}, CHECK
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "configuration error: TICKWORK_SECRET_KEYS entry 1 is not a Fernet key (32 bytes, "
        "url-safe base64: make one with `python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'`)"
    ]


def test_a_malformed_setting_names_the_variable():
    result = _django_setup({"DEBUG": "1", "SCHEDULER_SHARD_COUNT": "four"})
    assert result.returncode != 0
    assert "SCHEDULER_SHARD_COUNT='four': expected a whole number" in result.stderr


def test_a_run_retention_out_of_bounds_is_refused_at_start_up():
    result = _django_setup({"DEBUG": "1", "RUN_RETENTION_DAYS": "4000"})
    assert result.returncode != 0
    assert "RUN_RETENTION_DAYS=4000: at most 3650 (or 0: off)" in result.stderr
    result = _django_setup({"DEBUG": "1", "RUN_RETENTION_DAYS": "-1"})
    assert "RUN_RETENTION_DAYS=-1: must be at least 0" in result.stderr


def test_a_broker_other_than_the_schedulers_redis_or_rabbitmq_is_refused_in_one_line():
    """Workers on another broker would never see a run the leader publishes: refused.
    RabbitMQ is the one other broker the leader publishes to (ADR 0019)."""
    result = run_django({"DEBUG": "1", "CELERY_BROKER_URL": "redis://127.0.0.1:6379/9"}, CHECK)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("configuration error: CELERY_BROKER_URL must be REDIS_URL")
    assert "RabbitMQ URL (amqp://...)" in line
    amqp = _django_setup({"DEBUG": "1", "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1//"})
    assert amqp.returncode == 0, amqp.stderr


def test_a_bad_log_format_or_metrics_directory_stops_the_start(tmp_path):
    result = _django_setup({"DEBUG": "1", "LOG_FORMAT": "xml"})
    assert result.returncode != 0 and "LOG_FORMAT='xml': expected text or json" in result.stderr
    missing = tmp_path / "nowhere"
    result = _django_setup({"DEBUG": "1", "PROMETHEUS_MULTIPROC_DIR": str(missing)})
    assert result.returncode != 0 and "is not a directory" in result.stderr
    assert _django_setup({"DEBUG": "1", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}).returncode == 0


def test_make_run_empties_the_metrics_directory_before_starting(tmp_path):
    from devstack.__main__ import _metrics_dir

    stale = tmp_path / "metrics" / "counter_4242.db"
    stale.parent.mkdir()
    stale.write_bytes(b"old")
    keep = tmp_path / "metrics" / "README"
    keep.write_text("not ours")
    env: dict[str, str] = {}
    assert _metrics_dir(env, tmp_path) == stale.parent
    assert env["PROMETHEUS_MULTIPROC_DIR"] == str(stale.parent)
    assert not stale.exists() and keep.exists()


def test_a_template_schema_name_a_tenant_could_have_is_refused_at_start_up():
    for bad in ("t_template", "Template", "public", "pg_x", "a-b"):
        result = _django_setup({"DEBUG": "1", "TENANT_TEMPLATE_SCHEMA": bad})
        assert result.returncode != 0, bad
        assert f"TENANT_TEMPLATE_SCHEMA={bad!r}" in result.stderr
    assert _django_setup({"DEBUG": "1", "TENANT_TEMPLATE_SCHEMA": ""}).returncode == 0


def test_a_lease_of_a_fraction_of_a_second_is_refused_not_truncated():
    """The Redis lock expires in whole seconds: 1.5 made a 1 s lock beside database bounds
    computed from 1.5 s."""
    refused = _django_setup({"DEBUG": "1", "SCHEDULER_LEASE_SECONDS": "1.5"})
    assert refused.returncode != 0
    assert "SCHEDULER_LEASE_SECONDS='1.5': expected a whole number" in refused.stderr
    assert _django_setup({"DEBUG": "1", "SCHEDULER_LEASE_SECONDS": "0"}).returncode != 0
    accepted = _django_setup({"DEBUG": "1", "SCHEDULER_LEASE_SECONDS": "3"})
    assert accepted.returncode == 0, accepted.stderr


@pytest.mark.parametrize(
    ("value", "says"),
    [("4000", "=4000.0: at most 3600"), ("-1", "=-1.0: must be at least 0")],
)
def test_a_lookahead_extra_out_of_bounds_is_refused(value, says):
    """The leader holds every run prepared ahead in memory: an hour at most."""
    refused = _django_setup({"DEBUG": "1", "SCHEDULER_LOOKAHEAD_EXTRA_SECONDS": value})
    assert refused.returncode != 0
    assert f"SCHEDULER_LOOKAHEAD_EXTRA_SECONDS{says}" in refused.stderr
    accepted = _django_setup({"DEBUG": "1", "SCHEDULER_LOOKAHEAD_EXTRA_SECONDS": "0"})
    assert accepted.returncode == 0, accepted.stderr


def test_a_redis_socket_timeout_shorter_than_the_schedulers_blocking_read_is_refused():
    lease = {"DEBUG": "1", "SCHEDULER_LEASE_SECONDS": "4"}
    refused = _django_setup({**lease, "REDIS_SOCKET_TIMEOUT_SECONDS": "1"})
    assert refused.returncode != 0
    assert "REDIS_SOCKET_TIMEOUT_SECONDS=1 must exceed a quarter of SCHEDULER_LEASE_SECONDS" in (
        refused.stderr
    )
    accepted = _django_setup({**lease, "REDIS_SOCKET_TIMEOUT_SECONDS": "3"})
    assert accepted.returncode == 0, accepted.stderr


@pytest.mark.parametrize("value", ["2", "4000"])
def test_an_amqp_heartbeat_out_of_bounds_is_refused_at_start_up(value):
    result = _django_setup({"DEBUG": "1", "SCHEDULER_AMQP_HEARTBEAT_SECONDS": value})
    assert result.returncode != 0
    assert f"SCHEDULER_AMQP_HEARTBEAT_SECONDS={value}: 0 (no heartbeats) or 5 to 3600" in (
        result.stderr
    )
