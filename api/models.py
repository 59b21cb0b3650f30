"""API tokens: bearer credentials of a user, with a scope (read, operate or fleet; api.auth)."""

import hashlib
import secrets

from django.conf import settings
from django.db import models


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_raw_token() -> str:
    return "jet_" + secrets.token_urlsafe(32)


class TokenChangeRefused(ValueError):
    """A saved token may not be un-revoked, and its user and scope are fixed at creation."""


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 is stored; the raw value is shown once at creation."""

    # read: GET only. operate: every method (queue and fleet control). fleet: GET, and drain,
    # evacuate and undrain workers only (an autoscaler or ops tool that must not steer the queue).
    SCOPES = [("read", "read"), ("operate", "operate"), ("fleet", "fleet")]
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.TextField(blank=True, default="")
    scope = models.TextField(choices=SCOPES, default="read")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(
        max_length=12, editable=False, help_text="First characters, to recognise a token"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        db_table = "api_tokens"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=["read", "operate", "fleet"]), name="api_tokens_scope"
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {self.scope})"

    def save(self, *args, **kwargs):
        """Revocation is final and user and scope are fixed: checked against the stored row, so no
        form, admin or script can raise a token's rights or bring a revoked one back."""
        if self.pk is not None:
            stored = type(self).objects.filter(pk=self.pk).values("revoked", "scope", "user_id").first()
            if stored is not None:
                if stored["revoked"] and not self.revoked:
                    raise TokenChangeRefused("a revoked token cannot be restored; create a new one")
                if stored["scope"] != self.scope or stored["user_id"] != self.user_id:
                    raise TokenChangeRefused("a token's user and scope are fixed at creation")
        super().save(*args, **kwargs)

    def set_raw(self, raw: str) -> None:
        self.token_hash = hash_token(raw)
        self.prefix = raw[:12]

    @classmethod
    def issue(cls, user, scope: str = "read", name: str = "") -> tuple["ApiToken", str]:
        raw = new_raw_token()
        token = cls(user=user, scope=scope, name=name)
        token.set_raw(raw)
        token.save()
        return token, raw
