"""The media library: one row per video file under JETENCODE_MEDIA_ROOT. Plain application data
(the dashboard and the admin edit it; library stages register and validate files)."""

import uuid

from django.db import models

from scheduler.models import Job


class MediaAsset(models.Model):
    """A video file under JETENCODE_MEDIA_ROOT, with the metadata probed by `validate`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    path = models.TextField(unique=True, help_text="Relative to JETENCODE_MEDIA_ROOT")
    title = models.TextField(blank=True, default="")
    directory = models.TextField(
        blank=True, default="", help_text="Library directory (videos, public, inbox...)"
    )
    size_bytes = models.BigIntegerField(default=0)
    duration_seconds = models.FloatField(null=True, blank=True)
    width = models.IntegerField(null=True, blank=True)
    height = models.IntegerField(null=True, blank=True)
    fps = models.FloatField(null=True, blank=True)
    video_codec = models.TextField(blank=True, default="")
    audio_codec = models.TextField(blank=True, default="")
    bitrate = models.BigIntegerField(null=True, blank=True)
    orientation = models.TextField(blank=True, default="", help_text="landscape | portrait | square")
    has_audio = models.BooleanField(null=True, blank=True)
    valid = models.BooleanField(null=True, blank=True, help_text="None until validated")
    invalid_reason = models.TextField(blank=True, default="")
    thumbnail = models.TextField(blank=True, default="", help_text="Output-root relative path of a JPEG")
    tags = models.JSONField(default=list, blank=True)
    scenes = models.JSONField(default=list, blank=True)
    source_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    validated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "media_assets"
        indexes = [models.Index(fields=["directory", "-created_at"], name="media_assets_dir")]

    def __str__(self) -> str:
        return self.path


class Upload(models.Model):
    """A resumable (tus 1.0) upload into <media root>/uploads/ (media/uploads.py, api/uploads.py).

    Bytes go to a hidden temporary file until `offset == length` and the checksums match; then the
    file is renamed to its final name, probed and registered as `asset`. `token_id` is the API
    token that created it (a plain id: media sits below the api package), used for the per-token
    limit on uploads in progress.
    """

    RECEIVING = "receiving"
    COMPLETE = "complete"
    STATES = [(RECEIVING, "receiving"), (COMPLETE, "complete")]

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="+")
    token_id = models.BigIntegerField(null=True, blank=True)
    length = models.BigIntegerField(help_text="Upload-Length: the whole file, in bytes")
    offset = models.BigIntegerField(default=0, help_text="Bytes received and kept")
    metadata = models.JSONField(default=dict, blank=True, help_text="Upload-Metadata, decoded")
    filename = models.TextField(blank=True, default="")
    state = models.TextField(choices=STATES, default=RECEIVING)
    sha256 = models.TextField(blank=True, default="", help_text="Of the whole file, once complete")
    path = models.TextField(blank=True, default="", help_text="Media-root relative, once complete")
    asset = models.ForeignKey(MediaAsset, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    expires_at = models.DateTimeField(help_text="An upload still receiving after this is removed")
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "media_uploads"
        indexes = [
            models.Index(fields=["token_id", "state"], name="media_uploads_token_state"),
            models.Index(fields=["state", "expires_at"], name="media_uploads_expiry"),
        ]

    def __str__(self) -> str:
        return f"upload {self.pk} ({self.offset}/{self.length})"
