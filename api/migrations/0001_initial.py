"""ApiToken moves here from the jetencode app. State only: the table `api_tokens` (created by
jetencode's 0001) stays as it is; jetencode's 0003 drops the old model from the state."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("jetencode", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    state_operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.TextField(blank=True, default="")),
                (
                    "scope",
                    models.TextField(choices=[("read", "read"), ("operate", "operate")], default="read"),
                ),
                ("token_hash", models.CharField(editable=False, max_length=64, unique=True)),
                (
                    "prefix",
                    models.CharField(
                        editable=False, help_text="First characters, to recognise a token", max_length=12
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                ("revoked", models.BooleanField(default=False)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "api_tokens",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("scope__in", ["read", "operate"])), name="api_tokens_scope"
                    )
                ],
            },
        ),
    ]

    operations = [migrations.SeparateDatabaseAndState(state_operations=state_operations)]
