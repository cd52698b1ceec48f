"""GET /schedule/preview: next fire times with offsets, descriptions, and 400s that name the
parameter (and, for cron, the field) that is wrong."""

from __future__ import annotations

from .conftest import Api


def preview(api: Api, **params):
    return api.get("schedule/preview", **params)


def test_cron_preview_lists_instants_with_the_zones_offset(alpha_api: Api):
    response = preview(
        alpha_api,
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        start="2026-03-27T12:00:00Z",
        count="3",
    )
    assert response.status_code == 200
    assert response.json() == {
        "description": "At 02:30 (Europe/Berlin)",
        # 2026-03-29 02:30 does not exist in Berlin: shifted to 03:00 CEST (dst_gap=shift).
        "next": [
            "2026-03-28T02:30:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
        ],
    }


def test_dst_gap_skip_leaves_the_missing_slot_out(alpha_api: Api):
    times = preview(
        alpha_api,
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        dst_gap="skip",
        start="2026-03-27T12:00:00Z",
        count="2",
    ).json()["next"]
    assert times == ["2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00"]


def test_interval_preview_is_anchored_at_start(alpha_api: Api):
    body = preview(alpha_api, interval_seconds="90", start="2026-01-01T00:00:00Z", count="2").json()
    assert body == {
        "description": "Every 90 seconds",
        "next": ["2026-01-01T00:01:30+00:00", "2026-01-01T00:03:00+00:00"],
    }


def test_h_previews_with_the_preview_seed(alpha_api: Api):
    first = preview(alpha_api, cron="H * * * *").json()
    assert first == preview(alpha_api, cron="H * * * *").json()
    assert len(first["next"]) == 10  # the default count


def test_an_invalid_cron_field_is_named(alpha_api: Api):
    response = preview(alpha_api, cron="0 9 * * MON-FRY")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    [message] = response.json()["errors"]["cron"]
    assert message.startswith("day_of_week:")


def test_other_invalid_input_names_the_parameter(alpha_api: Api):
    def error_keys(**params) -> list[str]:
        response = preview(alpha_api, **params)
        assert response.status_code == 400, response.content
        return list(response.json()["errors"])

    assert error_keys(cron="* * * * *", timezone="Nowhere/Special") == ["timezone"]
    assert error_keys(cron="* * * * *", count="51") == ["count"]
    assert error_keys() == ["cron"]  # neither cron nor interval
    assert error_keys(cron="* * * * *", interval_seconds="60") == ["cron"]
    assert error_keys(interval_seconds="0") == ["interval_seconds"]
    assert error_keys(cron="0 0 30 2 *") == ["cron"]  # never fires
    assert error_keys(cron="* * * * *", start="tomorrow") == ["start"]


def test_preview_needs_a_token(live):
    assert preview(Api(None), cron="* * * * *").status_code == 401


def test_six_fields_preview_as_post_jobs_takes_them(alpha_api: Api):
    """With a minimum interval below a minute (1 s in the tests), GET /schedule/preview takes
    the six-field form POST /jobs takes; at 60 s it refuses it as POST /jobs does."""
    from django.test import override_settings

    body = preview(alpha_api, cron="*/15 * * * * *", start="2026-01-01T00:00:00Z", count="3")
    assert body.status_code == 200, body.content
    assert body.json()["next"] == [
        "2026-01-01T00:00:15+00:00",
        "2026-01-01T00:00:30+00:00",
        "2026-01-01T00:00:45+00:00",
    ]
    with override_settings(SCHEDULER_MIN_INTERVAL_SECONDS=60):
        refused = preview(alpha_api, cron="*/15 * * * * *", start="2026-01-01T00:00:00Z")
    assert refused.status_code == 400
