"""Job and JobOutput move here from the jetencode app: the scheduler's SQL writes their tables, and
the scheduler no longer imports anything above it.

State only (SeparateDatabaseAndState): the tables `jobs` and `job_outputs`, their indexes,
constraints and foreign keys stay exactly as they are, and so do the SQL functions that name them.
The foreign keys from the queue tables now point at `scheduler.Job` in Django's state; in the
database they always pointed at `jobs`. jetencode's 0003 then drops the old models from the state
and moves their content types (and with them the permissions, `operate_queue` included).
"""

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jetencode", "0002_groups"),
        ("scheduler", "0008_sql_by_concern"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    state_operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                (
                    "id",
                    models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False),
                ),
                ("type", models.TextField()),
                ("params", models.JSONField(default=dict)),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("pending", "pending"),
                            ("running", "running"),
                            ("retry_wait", "retry_wait"),
                            ("paused", "paused"),
                            ("completed", "completed"),
                            ("failed", "failed"),
                            ("cancelled", "cancelled"),
                        ],
                        default="pending",
                    ),
                ),
                (
                    "priority",
                    models.IntegerField(
                        default=0, help_text="As requested at creation; the live value is on the schedule."
                    ),
                ),
                ("max_attempts", models.IntegerField(default=4)),
                (
                    "hardware",
                    models.TextField(
                        choices=[("auto", "auto"), ("cpu", "cpu"), ("gpu", "gpu")], default="auto"
                    ),
                ),
                (
                    "resource_category",
                    models.TextField(blank=True, help_text="Override for GPU-capable stages", null=True),
                ),
                (
                    "vram_mb",
                    models.IntegerField(blank=True, help_text="Override for GPU-capable stages", null=True),
                ),
                ("webhook_url", models.TextField(blank=True, null=True)),
                ("progress", models.SmallIntegerField(default=0)),
                ("log", models.TextField(blank=True, default="", help_text="Capped, append-only job log")),
                ("manual_retry_count", models.IntegerField(default=0)),
                ("last_error", models.TextField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "db_table": "jobs",
                "permissions": [
                    ("operate_queue", "Can steer the queue: create, move, pause, cancel and retry jobs")
                ],
                "indexes": [
                    models.Index(fields=["status", "-created_at"], name="jobs_status_created"),
                    models.Index(fields=["-created_at"], name="jobs_created"),
                    models.Index(fields=["type", "-created_at"], name="jobs_type_created"),
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "pending",
                                    "running",
                                    "retry_wait",
                                    "paused",
                                    "completed",
                                    "failed",
                                    "cancelled",
                                ],
                            )
                        ),
                        name="jobs_status_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("progress__gte", 0), ("progress__lte", 100)),
                        name="jobs_progress_range",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("hardware__in", ["auto", "cpu", "gpu"])),
                        name="jobs_hardware_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("max_attempts__gte", 1), ("max_attempts__lte", 20)),
                        name="jobs_max_attempts_range",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="JobOutput",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("execution_id", models.IntegerField()),
                ("task_id", models.BigIntegerField()),
                ("name", models.TextField(help_text="Path relative to the job's output directory")),
                ("kind", models.TextField(default="file")),
                ("storage_url", models.TextField(blank=True, default="")),
                ("size_bytes", models.BigIntegerField(default=0)),
                ("metadata", models.JSONField(default=dict)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="outputs",
                        to="scheduler.job",
                    ),
                ),
            ],
            options={
                "db_table": "job_outputs",
                "constraints": [
                    models.UniqueConstraint(fields=("job", "execution_id", "name"), name="job_outputs_once")
                ],
            },
        ),
        migrations.AlterField(
            model_name="jobschedule",
            name="job",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.CASCADE,
                primary_key=True,
                related_name="schedule",
                serialize=False,
                to="scheduler.job",
            ),
        ),
        migrations.AlterField(
            model_name="queuereservation",
            name="job",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="scheduler.job",
            ),
        ),
        migrations.AlterField(
            model_name="queuetask",
            name="job",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="tasks",
                to="scheduler.job",
            ),
        ),
    ]

    operations = [migrations.SeparateDatabaseAndState(state_operations=state_operations)]
