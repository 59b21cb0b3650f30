"""Django admin for API tokens."""

from __future__ import annotations

import secrets

from django.contrib import admin, messages

from api.models import ApiToken, hash_token


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are stored hashed: the raw value is shown once, in the message after adding one."""

    list_display = ("prefix", "user", "name", "scope", "created_at", "last_used_at", "revoked")
    list_filter = ("scope", "revoked")
    search_fields = ("prefix", "name", "user__username")
    list_select_related = ("user",)
    readonly_fields = ("prefix", "created_at", "last_used_at")
    actions = ["revoke_tokens"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "name", "scope")
        return ("user", "name", "scope", "revoked", "prefix", "created_at", "last_used_at")

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (("user",) if obj is not None else ())

    def save_model(self, request, obj, form, change):
        if not change:
            raw = "jet_" + secrets.token_urlsafe(32)
            obj.token_hash = hash_token(raw)
            obj.prefix = raw[:12]
            super().save_model(request, obj, form, change)
            self.message_user(
                request,
                f"New {obj.scope} token for {obj.user}: {raw} — copy it now, it is not shown again.",
                messages.WARNING,
            )
            return
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset):
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"Revoked {count} token{'s' if count != 1 else ''}.", messages.SUCCESS)
