"""Dedicated execution end to end (issue 36): a reservation records its bound session, generation,
timestamps and provisioning attempts; installs scheduler/sql/migrations/0018_dedicated_execution.sql
(a delta: 55_reservations.sql, bind_reservation_v2 instead of v1, register_worker_v1 clearing a
re-registered uid's binding, release_job_v2's cause lost_reserved)."""

from django.db import migrations, models

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0017_undrain"),
    ]

    operations = [
        migrations.AddField(
            model_name="queuereservation",
            name="bound_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queuereservation",
            name="ended_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queuereservation",
            name="generation",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="queuereservation",
            name="next_provision_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queuereservation",
            name="provision_attempts",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="queuereservation",
            name="provisioned_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queuereservation",
            name="requested_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="queuereservation",
            name="worker_session_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.RunPython(run_sql_file("0018_dedicated_execution.sql"), migrations.RunPython.noop),
    ]
