"""Create the dashboard's two groups: Operators (may act) and Viewers (read only).

The models were still in the jetencode app then, so the permissions are jetencode's; migration
0003 moves them, with their content types, to the apps the models moved to. This is a copy of
`ensure_groups` as it was, so that a new database migrates the way an old one did.
"""

from django.db import migrations

VIEW_MODELS = ["job", "joboutput", "mediaasset"]


def create_groups(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # During migrations permissions are only created after the run (post_migrate); create ours now.
    for app_config in apps.get_app_configs():
        if app_config.label in ("jetencode", "auth", "contenttypes"):
            stub = getattr(app_config, "models_module", None) is None
            if stub:
                app_config.models_module = True
            create_permissions(app_config, apps=apps, verbosity=0)
            if stub:
                app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    view = list(
        Permission.objects.filter(
            content_type__app_label="jetencode", codename__in=[f"view_{m}" for m in VIEW_MODELS]
        )
    )
    viewers, _ = Group.objects.get_or_create(name="Viewers")
    viewers.permissions.add(*view)
    operators, _ = Group.objects.get_or_create(name="Operators")
    operators.permissions.add(
        *view, Permission.objects.get(content_type__app_label="jetencode", codename="operate_queue")
    )


class Migration(migrations.Migration):
    dependencies = [("jetencode", "0001_initial"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]
