"""`jobs_job.has_calendars`: whether the job is on any exclusion calendar, kept by
PostgreSQL itself (a trigger on the links table), so that the leader's job lock reads the
calendar tables only for the jobs that have some (ADR 0024).

The column is not a model field on purpose: a `Job.save()` writes every field it knows,
and would write back a value read before a calendar was linked. Only the trigger writes
it. The trigger's function lives in `public`, shared by every tenant schema (it names the
tables through `TG_TABLE_SCHEMA`), so a clone of the template schema carries only the
trigger. The first schema migrated creates it; `migrate_schemas` runs this migration for
several schemas at once, and one that loses the race to create it takes the winner's.
"""

from django.db import migrations

# A link added: the job has a calendar; set unconditionally (with `AND NOT has_calendars`
# the update would skip a row whose visible version says true while a concurrent removal
# of the last link is about to commit false, and leave false). A link removed: recount,
# after locking the job row, in a statement of its own. Counted in the statement that takes the lock, the count
# would be of the snapshot taken before the wait, missing a link another transaction added
# and committed meanwhile, and would clear the flag of a job that has a calendar.
FUNCTION = r"""
DO $do$
BEGIN
  IF to_regprocedure('public.tickwork_job_calendars_changed()') IS NULL THEN
   BEGIN
    CREATE FUNCTION public.tickwork_job_calendars_changed() RETURNS trigger
    LANGUAGE plpgsql VOLATILE AS $fn$
    BEGIN
      IF TG_OP IN ('INSERT', 'UPDATE') THEN
        EXECUTE format('UPDATE %I.jobs_job SET has_calendars = true WHERE id = $1',
                       TG_TABLE_SCHEMA)
          USING NEW.job_id;
      END IF;
      IF TG_OP IN ('DELETE', 'UPDATE') THEN
        EXECUTE format('SELECT 1 FROM %I.jobs_job WHERE id = $1 FOR NO KEY UPDATE',
                       TG_TABLE_SCHEMA)
          USING OLD.job_id;
        EXECUTE format('UPDATE %1$I.jobs_job j SET has_calendars = EXISTS ('
                       'SELECT FROM %1$I.jobs_job_calendars c WHERE c.job_id = j.id) '
                       'WHERE j.id = $1', TG_TABLE_SCHEMA)
          USING OLD.job_id;
      END IF;
      RETURN NULL;
    END
    $fn$;
   EXCEPTION WHEN unique_violation OR duplicate_function THEN
    NULL;  -- another schema's migration created it first (and has committed)
   END;
  END IF;
END
$do$
"""

# The function first (its creation may wait for another schema's migration to commit,
# holding nothing of this schema meanwhile); then the links table locked against writes
# before `jobs_job` is touched, in the order a link's writer takes the two (the link, then
# at commit its foreign key's check of the job row), so that neither waits on the other
# in a cycle; the flag filled and the trigger added under that lock, so that no link can
# change between the fill and the trigger.
FORWARD = [
    FUNCTION,
    "LOCK TABLE jobs_job_calendars IN SHARE ROW EXCLUSIVE MODE",
    "ALTER TABLE jobs_job ADD COLUMN has_calendars boolean NOT NULL DEFAULT false",
    "UPDATE jobs_job j SET has_calendars = true "
    "WHERE EXISTS (SELECT FROM jobs_job_calendars c WHERE c.job_id = j.id)",
    "CREATE TRIGGER job_calendars_changed AFTER INSERT OR UPDATE OR DELETE "
    "ON jobs_job_calendars FOR EACH ROW EXECUTE FUNCTION public.tickwork_job_calendars_changed()",
]

# The shared function stays: other schemas' triggers call it.
BACKWARD = [
    "DROP TRIGGER job_calendars_changed ON jobs_job_calendars",
    "ALTER TABLE jobs_job DROP COLUMN has_calendars",
]


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0005_job_live_idx"),
    ]

    operations = [migrations.RunSQL(sql=FORWARD, reverse_sql=BACKWARD)]
