"""Who may do what: superusers are admins, the Operators group may act, Viewers may only look.

`operate_queue` is a permission of `scheduler.Job` (it was `jetencode.operate_queue` until the job
models moved here; jetencode's migration 0003 moved the permission rows with them, so the groups
and users that held it keep it).
"""

OPERATE_PERMISSION = "scheduler.operate_queue"
VIEW_PERMISSION = "scheduler.view_job"
# What the Viewers group may see: jobs, their outputs and the media library. Named by app label and
# model (the media app is a layer above and is not imported here).
VIEW_MODELS = [("scheduler", "job"), ("scheduler", "joboutput"), ("media", "mediaasset")]


def can_operate(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.has_perm(OPERATE_PERMISSION))


def can_view(user) -> bool:
    return bool(
        user
        and user.is_authenticated
        and user.is_active
        and (user.is_superuser or user.has_perm(VIEW_PERMISSION))
    )


def ensure_groups(apps=None) -> None:
    """Create (or repair) the Operators and Viewers groups and their permissions. Idempotent."""
    if apps is None:
        from django.apps import apps as global_apps

        apps = global_apps
    from django.contrib.auth.management import create_permissions

    # During migrations permissions are only created after the run (post_migrate); create ours now.
    labels = {label for label, _ in VIEW_MODELS}
    for app_config in apps.get_app_configs():
        if app_config.label in labels | {"auth", "contenttypes"}:
            stub = getattr(app_config, "models_module", None) is None
            if stub:
                app_config.models_module = True
            create_permissions(app_config, apps=apps, verbosity=0)
            if stub:
                app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    view = [
        permission
        for label, model in VIEW_MODELS
        for permission in Permission.objects.filter(content_type__app_label=label, codename=f"view_{model}")
    ]
    viewers, _ = Group.objects.get_or_create(name="Viewers")
    viewers.permissions.add(*view)
    operators, _ = Group.objects.get_or_create(name="Operators")
    app_label, codename = OPERATE_PERMISSION.split(".")
    operators.permissions.add(
        *view, Permission.objects.get(content_type__app_label=app_label, codename=codename)
    )
