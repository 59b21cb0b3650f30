"""`manage.py embedded_db status|stop`: look after the embedded PostgreSQL under var/."""

from django.core.management.base import BaseCommand

from jetencode import embedded_db


class Command(BaseCommand):
    help = "Show the status of, or stop, the embedded PostgreSQL server (used when DATABASE_URL is unset)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["status", "stop"])

    def handle(self, *args, action, **options):
        self.stdout.write(embedded_db.status() if action == "status" else embedded_db.stop())
