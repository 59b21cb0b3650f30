"""The models leave the jetencode app, which keeps only the project's glue: Job and JobOutput now
live in `scheduler`, MediaAsset in `media`, ApiToken in `api` (their first state-only migrations).

Two steps, neither touching a table:
1. Move the content types (jetencode, job) -> (scheduler, job) and so on. Permissions belong to a
   content type, so `jetencode.operate_queue` becomes `scheduler.operate_queue` with its grants:
   the Operators and Viewers groups, and any user given a permission directly, keep what they had.
   If the new content type already exists (a `migrate scheduler` run first creates it in its
   post_migrate step), the old one's permissions are merged into it and the old one removed.
2. Drop the four models from jetencode's state (SeparateDatabaseAndState: the tables stay).
"""

from django.db import migrations

MOVED = [("job", "scheduler"), ("joboutput", "scheduler"), ("mediaasset", "media"), ("apitoken", "api")]


def _move(apps, db, model, source, target):
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    LogEntry = apps.get_model("admin", "LogEntry")
    old = ContentType.objects.using(db).filter(app_label=source, model=model).first()
    if old is None:
        return  # never created (content types come from post_migrate): nothing to carry
    new = ContentType.objects.using(db).filter(app_label=target, model=model).first()
    if new is None:
        old.app_label = target
        old.save(using=db, update_fields=["app_label"])
        return
    for permission in Permission.objects.using(db).filter(content_type=old):
        kept = Permission.objects.using(db).filter(content_type=new, codename=permission.codename).first()
        if kept is None:
            permission.content_type = new
            permission.save(using=db, update_fields=["content_type"])
            continue
        for group in permission.group_set.all():
            group.permissions.add(kept)
        for user in permission.user_set.all():
            user.user_permissions.add(kept)
        permission.delete()
    LogEntry.objects.using(db).filter(content_type=old).update(content_type=new)
    old.delete()


def move_content_types(apps, schema_editor):
    for model, target in MOVED:
        _move(apps, schema_editor.connection.alias, model, "jetencode", target)


def move_content_types_back(apps, schema_editor):
    for model, target in MOVED:
        _move(apps, schema_editor.connection.alias, model, target, "jetencode")


class Migration(migrations.Migration):
    dependencies = [
        ("jetencode", "0002_groups"),
        ("scheduler", "0009_job_models"),
        ("media", "0001_initial"),
        ("api", "0001_initial"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(move_content_types, move_content_types_back),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="MediaAsset"),
                migrations.DeleteModel(name="ApiToken"),
                migrations.DeleteModel(name="JobOutput"),
                migrations.DeleteModel(name="Job"),
            ]
        ),
    ]
