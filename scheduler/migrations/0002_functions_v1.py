"""Install the scheduler's first SQL functions and seed the singleton.

Runs scheduler/sql/migrations/0002_functions_v1.sql: the v1 functions as this migration first
installed them. A release that changes a function's contract adds a *_v2 function in a new
migration with its own delta (scheduler/sqldelta.py), so workers of the previous release keep working during a rolling
deploy.
"""

from django.db import migrations

from scheduler.migrations import run_sql_file


def seed_singleton(apps, schema_editor):
    schema_editor.execute(
        "INSERT INTO queue_scheduler_state (id, rebalances, updated_at) VALUES (1, 0, now()) ON CONFLICT DO NOTHING"
    )


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0001_initial")]

    operations = [
        migrations.RunPython(run_sql_file("0002_functions_v1.sql"), migrations.RunPython.noop),
        migrations.RunPython(seed_singleton, migrations.RunPython.noop),
    ]
