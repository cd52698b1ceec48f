"""The back-off of failing tenants (no database: the clock is injected)."""

from __future__ import annotations

from beat.faults import MAX_BACKOFF_SECONDS, TenantFaults


def test_a_failing_tenant_is_skipped_for_a_doubling_back_off_and_cleared_by_success():
    ticks = [100.0]
    faults = TenantFaults(now=lambda: ticks[0])
    assert faults.allowed(7)
    assert faults.failed(7, "t_x", RuntimeError("relation does not exist")) == 1.0
    assert not faults.allowed(7) and faults.allowed(8)
    ticks[0] += 1.0
    assert faults.allowed(7)
    assert faults.failed(7, "t_x", RuntimeError("again")) == 2.0
    assert faults.report()[0] | {"retry_in_seconds": 0} == {
        "tenant_id": 7,
        "schema": "t_x",
        "error": "RuntimeError: again",
        "failures": 2,
        "retry_in_seconds": 0,
    }
    faults.succeeded(7)
    assert faults.allowed(7) and faults.report() == []


def test_the_back_off_is_capped():
    faults = TenantFaults(now=lambda: 0.0)
    for _ in range(20):
        backoff = faults.failed(1, "t", RuntimeError("x"))
    assert backoff == MAX_BACKOFF_SECONDS
