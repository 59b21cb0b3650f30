"""Create the dashboard's two groups: Operators (may act) and Viewers (read only)."""

from django.db import migrations


def create_groups(apps, schema_editor):
    from jetencode.permissions import ensure_groups

    ensure_groups(apps)


class Migration(migrations.Migration):
    dependencies = [("jetencode", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]
