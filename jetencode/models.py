"""The Job and media-library domain. Queue state lives in `scheduler.models`.

Job rows are written by the scheduler repository only (status, progress and log change in the same
transaction as the task transitions that cause them); the ORM here is for reading, for the admin
and for the media library, which is plain application data.
"""

import hashlib
import secrets
import uuid

from django.conf import settings
from django.db import models

from scheduler.constants import HARDWARE_CHOICES, JOB_STATUSES, TERMINAL_STATUSES


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    type = models.TextField()
    params = models.JSONField(default=dict)
    status = models.TextField(default="pending", choices=[(s, s) for s in JOB_STATUSES])
    priority = models.IntegerField(
        default=0, help_text="As requested at creation; the live value is on the schedule."
    )
    max_attempts = models.IntegerField(default=4)
    hardware = models.TextField(default="auto", choices=[(h, h) for h in HARDWARE_CHOICES])
    resource_category = models.TextField(null=True, blank=True, help_text="Override for GPU-capable stages")
    vram_mb = models.IntegerField(null=True, blank=True, help_text="Override for GPU-capable stages")
    webhook_url = models.TextField(null=True, blank=True)
    progress = models.SmallIntegerField(default=0)
    log = models.TextField(default="", blank=True, help_text="Capped, append-only job log")
    manual_retry_count = models.IntegerField(default=0)
    last_error = models.TextField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "jobs"
        permissions = [("operate_queue", "Can steer the queue: create, move, pause, cancel and retry jobs")]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="jobs_status_created"),
            models.Index(fields=["-created_at"], name="jobs_created"),
            models.Index(fields=["type", "-created_at"], name="jobs_type_created"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=list(JOB_STATUSES)), name="jobs_status_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(progress__gte=0, progress__lte=100), name="jobs_progress_range"
            ),
            models.CheckConstraint(
                condition=models.Q(hardware__in=list(HARDWARE_CHOICES)), name="jobs_hardware_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(max_attempts__gte=1, max_attempts__lte=20), name="jobs_max_attempts_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class JobOutput(models.Model):
    """A file a stage published under JETENCODE_OUTPUT_ROOT/<job id>/ (or the S3 bucket)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="outputs")
    execution_id = models.IntegerField()
    task_id = models.BigIntegerField()
    name = models.TextField(help_text="Path relative to the job's output directory")
    kind = models.TextField(default="file")
    storage_url = models.TextField(blank=True, default="")
    size_bytes = models.BigIntegerField(default=0)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "job_outputs"
        constraints = [
            models.UniqueConstraint(fields=["job", "execution_id", "name"], name="job_outputs_once"),
        ]

    def __str__(self) -> str:
        return self.name


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


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token. Only its SHA-256 is stored; the raw value is shown once at creation."""

    SCOPES = [("read", "read"), ("operate", "operate")]
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
            models.CheckConstraint(condition=models.Q(scope__in=["read", "operate"]), name="api_tokens_scope")
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user}, {self.scope})"

    @classmethod
    def issue(cls, user, scope: str = "read", name: str = "") -> tuple["ApiToken", str]:
        raw = "jet_" + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user, scope=scope, name=name, token_hash=hash_token(raw), prefix=raw[:12]
        )
        return token, raw
