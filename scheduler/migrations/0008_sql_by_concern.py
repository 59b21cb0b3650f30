"""The scheduler's SQL by concern (scheduler/sql/functions/): installs
scheduler/sql/migrations/0008_sql_by_concern.sql, the function files concatenated as they were when
this migration was written.

Same names, signatures and results as before (the contract does not change, so the functions are
replaced under their names): finish, fail and release share their fenced-write prologue
(begin_fenced_write_v1), fail and recovery their retry-or-fail transition (retry_or_fail_v1). It
also brings databases whose 0005 ran before the claim and finish refinements that followed it
(derived columns written by the claim, no empty publication inserts) up to date.
"""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0007_failover")]

    operations = [migrations.RunPython(run_sql_file("0008_sql_by_concern.sql"), migrations.RunPython.noop)]
