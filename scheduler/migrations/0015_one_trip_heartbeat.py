"""A worker's heartbeat in one round trip (issue 15): worker_beat_v1 renews a session's leases
(heartbeat_tasks_v1) and then its worker row (worker_heartbeat_v1) in one statement, which the
worker sends after its transaction-local timeouts in the same simple-protocol message; an idle
worker's beat was four round trips (BEGIN, the timeouts, the beat, COMMIT). Signatures unchanged;
worker_beat_v1 is new.
Installs scheduler/sql/migrations/0015_one_trip_heartbeat.sql."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0014_even_offers")]

    operations = [
        migrations.RunPython(run_sql_file("0015_one_trip_heartbeat.sql"), migrations.RunPython.noop),
    ]
