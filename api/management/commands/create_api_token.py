"""`python manage.py create_api_token USERNAME [--scope read|operate|fleet] [--name NAME]`

Prints the raw token as the last line of its output. Only its SHA-256 is stored: it cannot be shown
again, so a lost token is revoked (admin) and replaced.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from api.models import ApiToken
from scheduler.permissions import can_operate, can_view


class Command(BaseCommand):
    help = "Create an API token for a user and print it (the raw token is the last line; it is shown once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--scope",
            choices=["read", "operate", "fleet"],
            default="read",
            help="read: GET only; operate: everything the user's permissions allow; fleet: GET and drain, "
            "evacuate, undrain workers only (default read)",
        )
        parser.add_argument(
            "--name", default="", help="A label to recognise the token by (e.g. the integration)"
        )

    def handle(self, *args, username: str, scope: str, name: str, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None
        if not user.is_active:
            raise CommandError(f"user {username!r} is inactive")
        # The token works only as far as the user's permissions go; say so now rather than at the first 403.
        if not can_view(user):
            self.stderr.write(
                f"warning: {username} is in neither Viewers nor Operators: every request will get 403"
            )
        elif scope in ("operate", "fleet") and not can_operate(user):
            self.stderr.write(
                f"warning: {username} lacks scheduler.operate_queue: changes will get 403 "
                "(add the user to the Operators group)"
            )
        token, raw = ApiToken.issue(user, scope=scope, name=name)
        label = f" {name!r}" if name else ""
        self.stdout.write(
            f"Created {scope} token{label} for {username} (prefix {token.prefix}). "
            "Store it now; it is not shown again:"
        )
        self.stdout.write(raw)
