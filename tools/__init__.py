"""Tools for developing JetEncode, not part of the product (not in the wheel): the fault-injection
soak (`python -m tools.soak`, docs/reliability.md) and the dashboard screenshots
(`python -m tools.dashboard_screenshots`, docs/dashboard.md). Run them from the checkout's root."""

import os


def setup_django(application_name: str) -> None:
    """Configure Django for a tool run as `python -m tools.<name>`, as manage.py does for a command:
    the project's settings, the tool's name in pg_stat_activity, and the embedded PostgreSQL
    started when DATABASE_URL is unset."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jetencode.settings")
    os.environ.setdefault("JETENCODE_APPLICATION_NAME", application_name)
    import django

    from jetencode import embedded_db

    embedded_db.start_if_used()
    django.setup()
