"""Operator drains hold. A drained (or evacuated) worker that misses heartbeats for a moment is
reported offline; its next heartbeat made it active again, and it started claiming: the drain was
forgotten. queue_workers.drained_at remembers it (set when the session drains, cleared by an undrain
and by each registration), and the heartbeat brings such a worker back draining. An evacuation also
hands back the split-job stages it had to skip (their rows locked by the worker's own heartbeat at
that instant): scheduler.repository.evacuate_worker asks cluster_tasks_running_v1 how many are left
and hands them back in transactions of their own. Installs
scheduler/sql/migrations/0022_drains_survive_silence.sql (a delta)."""

from django.db import migrations, models

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0021_job_log_from_results")]

    operations = [
        migrations.AddField(
            model_name="queueworker", name="drained_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.RunPython(run_sql_file("0022_drains_survive_silence.sql"), migrations.RunPython.noop),
    ]
