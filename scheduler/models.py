"""Jobs and queue state: the job and its published outputs, one schedule row per job, one row per
stage delivery, workers and reservations.

These models give Django the schema (migrations, admin, reads). Every *write* to a job or to queue
state goes through `scheduler.repository`, whose SQL lives in `scheduler/sql/` (a job's status,
progress and log change in the same transaction as the task transitions that cause them); the
constraints below let the database refuse what the repository must never write.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from scheduler.constants import (
    HARDWARE_CHOICES,
    JOB_STATUSES,
    LIFECYCLES,
    PLACEMENTS,
    POOLS,
    RESERVATION_STATES,
    RESOURCE_CATEGORIES,
    TASK_STATES,
    TERMINAL_STATUSES,
)


class Job(models.Model):
    """A job: its type and params as submitted, the resources it asked for, and what the scheduler
    derives from its tasks (status, progress, the capped log). Queue state is on `JobSchedule`."""

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
            models.CheckConstraint(condition=Q(status__in=list(JOB_STATUSES)), name="jobs_status_valid"),
            models.CheckConstraint(
                condition=Q(progress__gte=0, progress__lte=100), name="jobs_progress_range"
            ),
            models.CheckConstraint(
                condition=Q(hardware__in=list(HARDWARE_CHOICES)), name="jobs_hardware_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1, max_attempts__lte=20), name="jobs_max_attempts_range"
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


class SchedulerState(models.Model):
    """The singleton row whose lock serializes claim selection and scheduling controls."""

    id = models.SmallIntegerField(primary_key=True, default=1)
    rebalances = models.BigIntegerField(default=0)
    # Audit rows removed by retention, by kind, so the /metrics counters never go down.
    purged_rejected = models.BigIntegerField(default=0, db_default=0)
    purged_recoveries = models.BigIntegerField(default=0, db_default=0)
    purged_retries = models.BigIntegerField(default=0, db_default=0)
    # Jobs moved off a worker, by cause (drained, evacuated, lost_in_dispatch, lost_after_delay,
    # manual): /metrics' jetencode_reassignments_total. Column default '{}' (migration 0007's SQL).
    reassignments = models.JSONField(default=dict)
    last_recovery_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "queue_scheduler_state"
        constraints = [models.CheckConstraint(condition=Q(id=1), name="scheduler_state_singleton")]


class JobSchedule(models.Model):
    job = models.OneToOneField(Job, primary_key=True, on_delete=models.CASCADE, related_name="schedule")
    execution_id = models.IntegerField(default=1)
    priority = models.IntegerField(default=0)
    position = models.BigIntegerField()
    required_worker_uid = models.TextField(null=True, blank=True)
    assigned_worker_uid = models.TextField(null=True, blank=True)
    # The claim groups jobs by worker: assigned, else targeted, else '' (the pending group).
    group_key = models.GeneratedField(
        expression=Coalesce(F("assigned_worker_uid"), F("required_worker_uid"), models.Value("")),
        output_field=models.TextField(),
        db_persist=True,
    )
    execution_mode = models.TextField(default="shared")
    reservation_id = models.UUIDField(null=True, blank=True)
    paused = models.BooleanField(default=False)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # A dispatch that needs a GPU is claimable only by workers with that category and VRAM.
    required_category = models.TextField(null=True, blank=True)
    required_vram_mb = models.IntegerField(default=0)
    # Maintained by refresh_job_v1 on every transition: when the earliest runnable media / background
    # (job-placement) task becomes available, NULL when there is none or the job may not run (paused,
    # cancelling, failed). The claim walks a partial index on these.
    media_runnable_at = models.DateTimeField(null=True, blank=True)
    media_categories = models.JSONField(null=True, blank=True)
    media_min_vram = models.IntegerField(null=True, blank=True)
    background_runnable_at = models.DateTimeField(null=True, blank=True)
    # How many times a lost worker made this job move (lost_in_dispatch, lost_after_delay): at
    # max_attempts it fails instead of moving again. A manual retry resets it. Column default 0.
    lost_workers = models.IntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "job_schedule"
        constraints = [
            models.CheckConstraint(
                condition=Q(execution_mode__in=["shared", "dedicated"]), name="schedule_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=-1000, priority__lte=1000), name="schedule_priority_range"
            ),
            models.CheckConstraint(
                condition=Q(execution_mode="shared") | Q(reservation_id__isnull=False),
                name="schedule_dedicated_has_reservation",
            ),
        ]
        indexes = [
            # The claim walks this index for the worker's group and the pending group ('') in claim order.
            models.Index(
                fields=["group_key", "-priority", "position", "media_runnable_at", "job"],
                name="schedule_claim_media",
                condition=Q(media_runnable_at__isnull=False),
            ),
            models.Index(
                fields=["group_key", "-priority", "position", "job"],
                name="schedule_group_order",
            ),
            # The queue count subtracts failed jobs whose cancel was requested: a handful, found
            # without reading every schedule the history has kept.
            models.Index(
                fields=["job"],
                name="schedule_cancel_requested",
                condition=Q(cancel_requested_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"schedule {self.job_id}"


class QueueTask(models.Model):
    id = models.BigAutoField(primary_key=True)
    # No single-column indexes on the two foreign keys: task_dedupe_once starts with (job_id,
    # execution_id), which is how a job's tasks are looked up (a job has few, so their state is
    # filtered on the rows), task_parent covers parent_task_id, and every index costs each task write
    # (~3 per stage: insert, claim, finish).
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="tasks", db_constraint=True, db_index=False
    )
    execution_id = models.IntegerField()
    task_type = models.TextField()
    payload = models.JSONField(default=dict)
    parent_task = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False, db_index=False
    )
    dedupe_key = models.TextField()
    wait_for_siblings = models.BooleanField(default=False)
    placement = models.TextField(default="job")
    pool = models.TextField(default="media")
    resource_category = models.TextField(default="cpu")
    vram_mb = models.IntegerField(default=0)
    target_worker_uid = models.TextField(null=True, blank=True)
    state = models.TextField(default="pending")
    available_at = models.DateTimeField()
    attempt = models.IntegerField(default=0)
    max_attempts = models.IntegerField(default=4)
    timeout_seconds = models.FloatField(default=600)
    claimed_by = models.TextField(null=True, blank=True)
    claimed_worker_session_id = models.UUIDField(null=True, blank=True)
    claimed_reservation_id = models.UUIDField(null=True, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    progress = models.FloatField(default=0)
    progress_detail = models.JSONField(default=dict)
    result = models.JSONField(null=True, blank=True)
    last_failure = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "queue_tasks"
        constraints = [
            models.CheckConstraint(condition=Q(state__in=list(TASK_STATES)), name="task_state_valid"),
            models.CheckConstraint(condition=Q(placement__in=list(PLACEMENTS)), name="task_placement_valid"),
            models.CheckConstraint(condition=Q(pool__in=list(POOLS)), name="task_pool_valid"),
            models.CheckConstraint(
                condition=Q(resource_category__in=list(RESOURCE_CATEGORIES)), name="task_category_valid"
            ),
            models.CheckConstraint(
                condition=Q(attempt__gte=0) & Q(attempt__lte=F("max_attempts")), name="task_attempt_range"
            ),
            models.CheckConstraint(condition=Q(vram_mb__gte=0), name="task_vram_nonnegative"),
            models.CheckConstraint(
                condition=Q(progress__gte=0, progress__lte=100), name="task_progress_range"
            ),
            models.CheckConstraint(
                condition=~Q(state="running")
                | (
                    Q(lease_token__isnull=False)
                    & Q(lease_expires_at__isnull=False)
                    & Q(claimed_worker_session_id__isnull=False)
                ),
                name="task_running_has_lease",
            ),
            models.UniqueConstraint(fields=["job", "execution_id", "dedupe_key"], name="task_dedupe_once"),
        ]
        indexes = [
            # The job's next runnable task, in claim order.
            models.Index(
                fields=["job", "execution_id", "available_at", "created_at", "id"],
                name="task_runnable_in_job",
                condition=Q(state__in=["pending", "retry_wait"]),
            ),
            # The capacity guard: running tasks of one worker session.
            models.Index(
                fields=["claimed_worker_session_id"],
                name="task_running_by_session",
                condition=Q(state="running"),
            ),
            # Recovery: expired leases.
            models.Index(
                fields=["lease_expires_at"], name="task_running_lease", condition=Q(state="running")
            ),
            # The background slot walks runnable background tasks directly (low volume).
            models.Index(
                fields=["available_at", "id"],
                name="task_background_runnable",
                condition=Q(state__in=["pending", "retry_wait"], pool="background"),
            ),
            models.Index(fields=["parent_task"], name="task_parent", condition=Q(parent_task__isnull=False)),
            models.Index(
                fields=["finished_at"], name="task_finished", condition=Q(finished_at__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.id} {self.task_type} ({self.state})"


class TaskLog(models.Model):
    """Timestamped stage log lines, capped per task by the repository."""

    id = models.BigAutoField(primary_key=True)
    task = models.ForeignKey(QueueTask, on_delete=models.CASCADE, related_name="logs", db_constraint=True)
    at = models.DateTimeField()
    message = models.TextField()

    class Meta:
        db_table = "queue_task_logs"
        indexes = [models.Index(fields=["task", "id"], name="task_logs_by_task")]


class FenceAudit(models.Model):
    """Append-only record of fenced writes: every accepted finish/failure/release/publication/recovery
    and every rejection (heartbeats and progress included), so 'no stale write took effect' is checkable."""

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    task_id = models.BigIntegerField()
    job_id = models.UUIDField(null=True)
    operation = models.TextField()
    accepted = models.BooleanField()
    reason = models.TextField(blank=True, default="")
    lease_token = models.UUIDField(null=True)
    worker_uid = models.TextField(null=True)
    session_id = models.UUIDField(null=True)
    attempt = models.IntegerField(null=True)
    execution_id = models.IntegerField(null=True)

    class Meta:
        db_table = "queue_fence_audit"
        indexes = [
            models.Index(fields=["task_id", "id"], name="fence_audit_task"),
            models.Index(fields=["at"], name="fence_audit_at"),
            models.Index(fields=["operation", "accepted"], name="fence_audit_operation"),
        ]


class QueueWorker(models.Model):
    uid = models.TextField(primary_key=True)
    current_session_id = models.UUIDField(null=True)
    hostname = models.TextField(blank=True, default="")
    pid = models.IntegerField(null=True)
    version = models.TextField(blank=True, default="")
    concurrency = models.IntegerField(default=1)
    background_slots = models.IntegerField(default=1)
    category_limits = models.JSONField(default=dict)
    vram_total_mb = models.IntegerField(default=0)
    lifecycle = models.TextField(default="active")
    reservation_id = models.UUIDField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True)
    last_heartbeat_at = models.DateTimeField(null=True)
    system_sample = models.JSONField(default=dict)
    capabilities = models.JSONField(default=dict)
    workspace = models.TextField(blank=True, default="")
    # When the current session said offline itself (a finished drain); NULL from each registration
    # on. The release pass treats a worker that left on purpose as drained, never as lost.
    left_at = models.DateTimeField(null=True, blank=True)
    # When the current session was drained (by an operator, or itself on SIGTERM); NULL from each
    # registration on and after an undrain. A drained worker that went stale comes back draining.
    drained_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "queue_workers"
        constraints = [
            models.CheckConstraint(
                condition=Q(lifecycle__in=list(LIFECYCLES)), name="worker_lifecycle_valid"
            ),
            models.CheckConstraint(condition=Q(concurrency__gte=0), name="worker_concurrency_nonnegative"),
        ]

    def __str__(self) -> str:
        return self.uid


class QueueReservation(models.Model):
    """A dedicated-execution reservation (scheduler/sql/functions/55_reservations.sql): the job, the
    worker session bound to it, and what provisioning it has seen. No provisioning here."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    worker_uid = models.TextField(null=True, blank=True)
    # The session that bound it: a new process of the same uid does not inherit the binding.
    worker_session_id = models.UUIDField(null=True, blank=True)
    state = models.TextField(default="requested")
    # How many times a worker bound it: a rebind after a lost worker is the next generation.
    generation = models.IntegerField(default=0, db_default=0)
    last_error = models.TextField(blank=True, default="")
    requested_at = models.DateTimeField(null=True, blank=True)  # since when it waits for a worker
    bound_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    provision_attempts = models.IntegerField(default=0, db_default=0)  # since it was last requested
    next_provision_at = models.DateTimeField(null=True, blank=True)  # NULL: nothing to provision
    provisioned_at = models.DateTimeField(null=True, blank=True)  # the last provisioner success
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "queue_reservations"
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=list(RESERVATION_STATES)),
                name="reservation_state_valid",
            )
        ]


class QueueSample(models.Model):
    """One row per minute, written by whichever worker's sampling loop gets there first."""

    at = models.DateTimeField(primary_key=True)
    pending = models.IntegerField(default=0)
    running = models.IntegerField(default=0)
    retry_wait = models.IntegerField(default=0)
    paused = models.IntegerField(default=0)
    completed = models.IntegerField(default=0, help_text="Jobs completed during the minute")
    failed = models.IntegerField(default=0, help_text="Jobs failed during the minute")
    stages_completed = models.IntegerField(default=0)

    class Meta:
        db_table = "queue_samples"
