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
