"""Who may do what: superusers are admins, the Operators group may act, Viewers may only look."""

OPERATE_PERMISSION = "jetencode.operate_queue"
VIEW_MODELS = ["job", "joboutput", "mediaasset"]


def can_operate(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.has_perm(OPERATE_PERMISSION))


def can_view(user) -> bool:
    return bool(
        user
        and user.is_authenticated
        and user.is_active
        and (user.is_superuser or user.has_perm("jetencode.view_job"))
    )


def ensure_groups(apps=None) -> None:
    """Create (or repair) the Operators and Viewers groups and their permissions. Idempotent."""
    if apps is None:
        from django.apps import apps as global_apps

        apps = global_apps
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
