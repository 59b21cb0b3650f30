"""The one table of the project's glue: failed logins, for login throttling (jetencode/login.py).

In PostgreSQL like everything else, so every web process behind a load balancer counts the same
failures (a per-process cache would multiply the limit by the number of processes)."""

from django.db import models


class LoginFailure(models.Model):
    """One failed login: who it named and where it came from."""

    username = models.CharField(max_length=150)
    address = models.GenericIPAddressField(null=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "login_failures"
        indexes = [
            models.Index(fields=["username", "at"], name="login_failures_user_at"),
            models.Index(fields=["address", "at"], name="login_failures_address_at"),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.at:%Y-%m-%d %H:%M:%S}"
