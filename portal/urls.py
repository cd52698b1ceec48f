from django.urls import path, re_path

from . import account_views, alert_views, dag_views, job_views, run_views, views

app_name = "dashboard"

urlpatterns = [
    path("", views.home, name="home"),
    path("jobs/", views.jobs_page, name="jobs"),
    path("jobs/bulk", views.jobs_bulk, name="jobs-bulk"),
    path("jobs/new", job_views.job_new, name="job-new"),
    path("jobs/preview", job_views.schedule_preview_partial, name="schedule-preview"),
    path("jobs/<int:job_id>/", job_views.job_detail, name="job"),
    path("jobs/<int:job_id>/edit", job_views.job_edit, name="job-edit"),
    path("jobs/<int:job_id>/pause", job_views.job_pause, name="job-pause"),
    path("jobs/<int:job_id>/resume", job_views.job_resume, name="job-resume"),
    path("jobs/<int:job_id>/run", job_views.job_run, name="job-run"),
    path("jobs/<int:job_id>/backfill", job_views.job_backfill_view, name="job-backfill"),
    path("jobs/<int:job_id>/delete", job_views.job_delete, name="job-delete"),
    path("jobs/<int:job_id>/dag", dag_views.job_dag, name="job-dag"),
    path("jobs/pick", dag_views.job_pick, name="job-pick"),
    path("jobs/pick/chip", dag_views.job_pick_chip, name="job-pick-chip"),
    path("dag-runs/<uuid:dag_run_id>/", dag_views.dag_run_detail, name="dag-run"),
    path("runs/<uuid:run_id>/", run_views.run_detail, name="run"),
    path("runs/<uuid:run_id>/cancel", run_views.run_cancel_view, name="run-cancel"),
    path("runs/<uuid:run_id>/replay", run_views.run_replay_view, name="run-replay"),
    path("runs/<uuid:run_id>/discard", run_views.run_discard_view, name="run-discard"),
    path("dlq/", run_views.dlq, name="dlq"),
    path("dlq/bulk", run_views.dlq_bulk, name="dlq-bulk"),
    path("alerts/", alert_views.alerts_page, name="alerts"),
    path("tokens/", account_views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", account_views.token_revoke, name="token-revoke"),
    path("members/", account_views.members, name="members"),
    path("members/<int:user_id>/remove", account_views.member_remove_view, name="member-remove"),
    re_path(r"^admin(?:/.*)?$", account_views.admin_elsewhere, name="admin-elsewhere"),
]
