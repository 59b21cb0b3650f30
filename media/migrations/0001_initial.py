"""MediaAsset moves here from the jetencode app. State only: the table `media_assets` (created by
jetencode's 0001) stays as it is; jetencode's 0003 drops the old model from the state."""

import uuid

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [("scheduler", "0009_job_models")]

    state_operations = [
        migrations.CreateModel(
            name="MediaAsset",
            fields=[
                (
                    "id",
                    models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False),
                ),
                ("path", models.TextField(help_text="Relative to JETENCODE_MEDIA_ROOT", unique=True)),
                ("title", models.TextField(blank=True, default="")),
                (
                    "directory",
                    models.TextField(
                        blank=True, default="", help_text="Library directory (videos, public, inbox...)"
                    ),
                ),
                ("size_bytes", models.BigIntegerField(default=0)),
                ("duration_seconds", models.FloatField(blank=True, null=True)),
                ("width", models.IntegerField(blank=True, null=True)),
                ("height", models.IntegerField(blank=True, null=True)),
                ("fps", models.FloatField(blank=True, null=True)),
                ("video_codec", models.TextField(blank=True, default="")),
                ("audio_codec", models.TextField(blank=True, default="")),
                ("bitrate", models.BigIntegerField(blank=True, null=True)),
                (
                    "orientation",
                    models.TextField(blank=True, default="", help_text="landscape | portrait | square"),
                ),
                ("has_audio", models.BooleanField(blank=True, null=True)),
                ("valid", models.BooleanField(blank=True, help_text="None until validated", null=True)),
                ("invalid_reason", models.TextField(blank=True, default="")),
                (
                    "thumbnail",
                    models.TextField(blank=True, default="", help_text="Output-root relative path of a JPEG"),
                ),
                ("tags", models.JSONField(blank=True, default=list)),
                ("scenes", models.JSONField(blank=True, default=list)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("validated_at", models.DateTimeField(blank=True, null=True)),
                (
                    "source_job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="scheduler.job",
                    ),
                ),
            ],
            options={
                "db_table": "media_assets",
                "indexes": [models.Index(fields=["directory", "-created_at"], name="media_assets_dir")],
            },
        ),
    ]

    operations = [migrations.SeparateDatabaseAndState(state_operations=state_operations)]
