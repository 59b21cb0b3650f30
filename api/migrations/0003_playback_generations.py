"""Signed playback URLs: the per-job generation that revoking them advances (api.playback)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("api", "0002_fleet_scope")]

    operations = [
        migrations.CreateModel(
            name="PlaybackGeneration",
            fields=[
                ("job_id", models.UUIDField(primary_key=True, serialize=False)),
                ("generation", models.PositiveIntegerField(default=0)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={"db_table": "api_playback_generations"},
        ),
    ]
