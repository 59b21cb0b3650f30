"""Install the scheduler's SQL functions (scheduler/sql/functions_v1.sql) and seed the singleton.

The SQL file is read when this migration runs. A release that changes a function's behaviour adds
a *_v2 function in a new SQL file and migration, so workers of the previous release keep working
during a rolling deploy.
"""

from django.db import migrations

from scheduler.migrations import reinstall_functions_v1 as install_functions


def seed_singleton(apps, schema_editor):
    schema_editor.execute(
        "INSERT INTO queue_scheduler_state (id, rebalances, updated_at) VALUES (1, 0, now()) ON CONFLICT DO NOTHING"
    )


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0001_initial")]

    operations = [
        migrations.RunPython(install_functions, migrations.RunPython.noop),
        migrations.RunPython(seed_singleton, migrations.RunPython.noop),
    ]
