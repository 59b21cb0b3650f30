"""Django admin for API tokens (and, read-only, the playback revocation generations).

Tokens are stored hashed. The raw value exists once, in the response to the add form: a page of its
own (never a flash message, which Django keeps in a cookie or the session), sent with
`Cache-Control: no-store`. Once created a token's user and scope are fixed, revocation is final,
and only superusers may mint a token for someone else (a staff user's token is their own, so a
token can never carry more than its maker's rights).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse

from api.models import ApiToken, PlaybackGeneration, new_raw_token


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
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
        if obj is None:
            return self.readonly_fields
        fixed = ("user", "scope") + (("revoked",) if obj.revoked else ())
        return self.readonly_fields + fixed

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        return queryset if request.user.is_superuser else queryset.filter(user=request.user)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "user" and not request.user.is_superuser:
            kwargs["queryset"] = get_user_model().objects.filter(pk=request.user.pk)
            kwargs["initial"] = request.user.pk
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)  # the model refuses un-revoking and a new scope
            return
        if obj.user_id != request.user.pk and not request.user.is_superuser:
            raise PermissionDenied("only superusers may create tokens for other users")
        raw = new_raw_token()
        obj.set_raw(raw)
        super().save_model(request, obj, form, change)
        obj._raw_token = raw  # for response_add only; never stored, never in a message

    def response_add(self, request, obj, post_url_continue=None):
        raw = getattr(obj, "_raw_token", None)
        if raw is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "title": "Copy the new token now",
            "opts": self.model._meta,
            "token": obj,
            "raw_token": raw,
        }
        response = TemplateResponse(request, "admin/api/apitoken/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset):
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"Revoked {count} token{'s' if count != 1 else ''}.", messages.SUCCESS)


@admin.register(PlaybackGeneration)
class PlaybackGenerationAdmin(admin.ModelAdmin):
    """Read-only: a job's signed playback URLs are revoked with `DELETE /v2/jobs/{id}/playback`
    (which advances the generation atomically), not by editing the number."""

    list_display = ("job_id", "generation", "revoked_at")
    search_fields = ("job_id",)
    readonly_fields = ("job_id", "generation", "revoked_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
