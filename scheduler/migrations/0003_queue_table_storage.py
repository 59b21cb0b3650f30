"""Storage settings for the high-churn queue tables.

Every claim and finish rewrites rows of job_schedule, queue_tasks, jobs and the scheduler singleton,
leaving dead index entries at the head of the claim index. Vacuum and analyze them far more often
than PostgreSQL's defaults (20 % of the table), and leave free space in their pages so updates that
touch no indexed column can stay on the page (HOT).
"""

from django.db import migrations

TABLES = ["job_schedule", "queue_tasks", "jobs", "queue_workers", "queue_scheduler_state"]

SETTINGS = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 200, "
    "autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 200, "
    "autovacuum_vacuum_cost_delay = 0, fillfactor = 80"
)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0002_functions_v1")]

    operations = [
        migrations.RunSQL(
            [f"ALTER TABLE {table} SET ({SETTINGS})" for table in TABLES],
            [
                f"ALTER TABLE {table} RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
                "autovacuum_analyze_scale_factor, autovacuum_analyze_threshold, autovacuum_vacuum_cost_delay, fillfactor)"
                for table in TABLES
            ],
        )
    ]
