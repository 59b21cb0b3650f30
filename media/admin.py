"""Django admin for the media library, and the job admin with a filter on the job types.

The library is plain application data: editable, except what the probe measured. Its one action
creates `validate` jobs through `media.submission`, as the dashboard does.
"""

from __future__ import annotations

from django.contrib import admin, messages

from media.jobtypes import JOB_TYPES
from media.models import MediaAsset, Upload
from media.probe import ASSET_FIELDS
from media.submission import ValidationError, create_job
from scheduler import admin as scheduler_admin
from scheduler.adminkit import MAX_ACTION_ROWS, ReadOnlyAdmin, choices_filter
from scheduler.models import Job
from scheduler.permissions import can_operate

# The scheduler registers the job admin without knowing the job types (they are this app's
# registry); register it again with a fixed-choice filter on them (no SELECT DISTINCT on jobs).
admin.site.unregister(Job)


@admin.register(Job)
class JobAdmin(scheduler_admin.JobAdmin):
    list_filter = ("status", choices_filter("type", sorted(JOB_TYPES)), "hardware", "created_at")


@admin.register(MediaAsset)
class MediaAssetAdmin(admin.ModelAdmin):
    """The library is plain application data: editable, except what the probe measured."""

    list_display = (
        "path",
        "title",
        "directory",
        "duration_seconds",
        "resolution",
        "video_codec",
        "valid",
        "created_at",
    )
    list_filter = ("valid", "directory", "orientation", "has_audio")
    search_fields = ("path", "title")
    readonly_fields = (
        "id",
        *ASSET_FIELDS,
        "valid",
        "invalid_reason",
        "validated_at",
        "source_job",
        "created_at",
        "updated_at",
    )
    list_select_related = ("source_job",)
    actions = ["validate_assets"]

    def has_operate_permission(self, request) -> bool:
        return can_operate(request.user)

    @admin.display(description="resolution")
    def resolution(self, obj):
        return f"{obj.width}×{obj.height}" if obj.width and obj.height else ""

    @admin.action(description="Validate selected assets (creates validate jobs)", permissions=["operate"])
    def validate_assets(self, request, queryset):
        created, refused = 0, []
        for asset in queryset[:MAX_ACTION_ROWS]:
            try:
                create_job(request.user, {"type": "validate", "params": {"video_id": str(asset.pk)}})
            except ValidationError as exc:
                refused.append(f"{asset.path}: {exc}")
            else:
                created += 1
        if created:
            self.message_user(
                request, f"Created {created} validate job{'s' if created != 1 else ''}.", messages.SUCCESS
            )
        if refused:
            self.message_user(request, "Not created: " + "; ".join(refused[:10]), messages.WARNING)


@admin.register(Upload)
class UploadAdmin(ReadOnlyAdmin):
    """Resumable uploads (tus): read-only; abandoned ones expire by themselves (media.uploads)."""

    list_display = ("id", "user", "filename", "state", "offset", "length", "expires_at", "asset")
    list_filter = (choices_filter("state", [Upload.RECEIVING, Upload.COMPLETE]), "created_at")
    list_select_related = ("user", "asset")
    search_fields = ("filename",)
