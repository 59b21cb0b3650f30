"""The per-minute queue sample taken once across the farm (issue 15): record_sample_v1 looks the
minute up before counting, so of a farm's workers asking once a minute one counts and the rest
read one primary-key entry (each took the counts and then lost the INSERT's conflict); in PL/pgSQL,
so its plan is kept for the session. Signature and answers unchanged.
Installs scheduler/sql/migrations/0016_sample_once_a_minute.sql."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0015_one_trip_heartbeat")]

    operations = [
        migrations.RunPython(run_sql_file("0016_sample_once_a_minute.sql"), migrations.RunPython.noop),
    ]
