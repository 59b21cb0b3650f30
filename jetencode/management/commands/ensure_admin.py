"""Create the first admin account if there is none, and print its login (every run)."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from jetencode.env import create_secret_file


class Command(BaseCommand):
    help = "Create the 'admin' superuser with a generated password kept under var/, and print the login."

    def handle(self, *args, **options):
        password_file = settings.VAR_DIR / "admin_password"
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is None or not password_file.exists():
            password = secrets.token_urlsafe(12)
            if user is None:
                user = User.objects.create_superuser("admin", email="", password=password)
            else:
                user.set_password(password)
                user.save(update_fields=["password"])
            password_file.unlink(missing_ok=True)  # a stale file of an earlier admin
            create_secret_file(password_file, password)
        password = password_file.read_text().strip()
        self.stdout.write(f"Admin login: username 'admin', password '{password}' (kept in {password_file})")
