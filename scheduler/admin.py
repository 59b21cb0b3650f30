"""Django admin for jobs and the queue tables: all read-only (leases and fencing included); the only
changes are actions that call `scheduler.repository` — job controls on jobs and schedules (each
ending in `message_user` with what happened and what was refused and why), drain and evacuate on
workers.

jobs, queue_tasks, queue_task_logs and queue_fence_audit can hold millions of rows: their admins
never count the table (CheapPaginator, no full result count, no facets), filter on fixed value lists
instead of SELECT DISTINCT, and search by exact ids that hit an index.
"""

from __future__ import annotations

import uuid

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from scheduler import repository
from scheduler.adminkit import MAX_ACTION_ROWS, CheapPaginationMixin, ReadOnlyAdmin, choices_filter
from scheduler.constants import (
    LIFECYCLES,
    PLACEMENTS,
    POOLS,
    RESERVATION_STATES,
    RESOURCE_CATEGORIES,
    TASK_STATES,
)
from scheduler.models import (
    FenceAudit,
    Job,
    JobOutput,
    JobSchedule,
    QueueReservation,
    QueueSample,
    QueueTask,
    QueueWorker,
    SchedulerState,
    TaskLog,
)
from scheduler.permissions import can_operate


class JobActionsMixin:
    """Admin actions on jobs through the repository. `job_id_of(obj)` maps a row to its job."""

    def has_operate_permission(self, request) -> bool:
        return can_operate(request.user)

    def job_ids(self, queryset) -> list:
        return list(queryset.values_list(self.job_id_field, flat=True)[:MAX_ACTION_ROWS])

    def run_job_action(self, request, queryset, operation, done: str) -> None:
        succeeded, refused = 0, []
        for job_id in self.job_ids(queryset):
            try:
                operation(job_id)
            except (repository.ActionNotAllowed, repository.JobNotFound, repository.InvalidArgument) as exc:
                refused.append(f"{str(job_id)[:8]}: {exc}")
            else:
                succeeded += 1
        if succeeded:
            self.message_user(
                request, f"{done} {succeeded} job{'s' if succeeded != 1 else ''}.", messages.SUCCESS
            )
        if refused:
            more = f" (and {len(refused) - 10} more)" if len(refused) > 10 else ""
            self.message_user(request, "Refused: " + "; ".join(refused[:10]) + more, messages.WARNING)

    @admin.action(description="Cancel selected jobs", permissions=["operate"])
    def cancel_jobs(self, request, queryset):
        self.run_job_action(request, queryset, repository.cancel, "Cancel requested for")

    @admin.action(description="Retry selected failed jobs", permissions=["operate"])
    def retry_jobs(self, request, queryset):
        self.run_job_action(request, queryset, repository.retry, "Retrying")

    @admin.action(description="Pause selected jobs", permissions=["operate"])
    def pause_jobs(self, request, queryset):
        self.run_job_action(request, queryset, repository.pause, "Paused")

    @admin.action(description="Resume selected jobs", permissions=["operate"])
    def resume_jobs(self, request, queryset):
        self.run_job_action(request, queryset, repository.resume, "Resumed")

    @admin.action(
        description="Redispatch selected jobs (new execution on any worker)", permissions=["operate"]
    )
    def redispatch_jobs(self, request, queryset):
        who = request.user.get_username()
        self.run_job_action(
            request,
            queryset,
            lambda job_id: repository.redispatch(job_id, f"redispatched in the admin by {who}"),
            "Redispatched",
        )

    @admin.action(
        description="Run selected jobs on a dedicated worker (reserve one each)", permissions=["operate"]
    )
    def dedicate_jobs(self, request, queryset):
        self.run_job_action(request, queryset, repository.reserve_job, "Waiting for a dedicated worker:")

    job_actions = [
        "cancel_jobs",
        "retry_jobs",
        "pause_jobs",
        "resume_jobs",
        "redispatch_jobs",
        "dedicate_jobs",
    ]


def _search_uuid(term: str):
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


def _job_link(job_id):
    if not job_id:
        return ""
    return format_html(
        '<a href="{}">{}</a>', reverse("admin:scheduler_job_change", args=[job_id]), str(job_id)[:8]
    )


def _ids_search(queryset, term: str, *, int_field: str | None, uuid_field: str | None, text_fields=()):
    """Exact id lookups (indexed) for numbers and UUIDs; a short text match otherwise."""
    term = term.strip()
    if not term:
        return queryset
    if "\x00" in term:
        return queryset.none()  # PostgreSQL text cannot hold NUL: nothing can match it
    # ASCII digits only ("²".isdigit() is true, int("²") raises), and within bigint.
    if int_field and term.isascii() and term.isdigit():
        return queryset.filter(**{int_field: int(term)}) if len(term) <= 18 else queryset.none()
    if uuid_field:
        try:
            return queryset.filter(**{uuid_field: uuid.UUID(term)})
        except ValueError:
            pass
    if text_fields:
        return queryset.filter(**{text_fields[0]: term})
    return queryset.none()


@admin.register(Job)
class JobAdmin(JobActionsMixin, CheapPaginationMixin, ReadOnlyAdmin):
    job_id_field = "pk"
    actions = JobActionsMixin.job_actions
    list_display = (
        "short_id",
        "type",
        "status",
        "progress_display",
        "live_priority",
        "worker",
        "created_at",
        "finished_at",
        "created_by",
    )
    # media/admin.py registers this again with a filter on the job types (that app's registry).
    list_filter = ("status", "hardware", "created_at")
    list_select_related = ("schedule", "created_by")
    search_fields = ("type",)
    search_help_text = "A job id (exact) or a job type."
    ordering = ("-created_at",)
    readonly_fields = ("dashboard_link",)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "dashboard_link",
                    "id",
                    "type",
                    "status",
                    "progress",
                    "params",
                    "priority",
                    "max_attempts",
                    "manual_retry_count",
                    "last_error",
                )
            },
        ),
        ("Resources", {"fields": ("hardware", "resource_category", "vram_mb", "webhook_url")}),
        (
            "History",
            {"fields": ("created_by", "created_at", "updated_at", "started_at", "finished_at", "log")},
        ),
    )

    def get_search_results(self, request, queryset, search_term):
        job_id = _search_uuid(search_term)
        if job_id is not None:
            return queryset.filter(pk=job_id), False
        if "\x00" in search_term:
            return queryset.none(), False
        return queryset.filter(type__icontains=search_term.strip()) if search_term else queryset, False

    @admin.display(description="job", ordering="created_at")
    def short_id(self, obj):
        return str(obj.pk)[:8]

    @admin.display(description="progress", ordering="progress")
    def progress_display(self, obj):
        return f"{obj.progress}%"

    @admin.display(description="priority", ordering="schedule__priority")
    def live_priority(self, obj):
        schedule = getattr(obj, "schedule", None)
        return schedule.priority if schedule else obj.priority

    @admin.display(description="worker")
    def worker(self, obj):
        schedule = getattr(obj, "schedule", None)
        if schedule is None:
            return ""
        if schedule.assigned_worker_uid:
            return schedule.assigned_worker_uid
        return f"→ {schedule.required_worker_uid}" if schedule.required_worker_uid else ""

    @admin.display(description="dashboard")
    def dashboard_link(self, obj):
        tasks = reverse("admin:scheduler_queuetask_changelist") + f"?q={obj.pk}"
        return format_html(
            '<a href="{}">Open on the dashboard</a> · <a href="{}">Stage deliveries</a>',
            reverse("dashboard:job", args=[obj.pk]),
            tasks,
        )


@admin.register(JobOutput)
class JobOutputAdmin(CheapPaginationMixin, ReadOnlyAdmin):
    list_display = ("name", "job", "kind", "size_bytes", "execution_id", "storage_url", "created_at")
    list_filter = (choices_filter("kind", ["video", "image", "playlist", "data", "file"]),)
    list_select_related = ("job",)
    search_fields = ("name",)
    search_help_text = "A job id (exact) or part of a file name."
    ordering = ("-id",)

    def get_search_results(self, request, queryset, search_term):
        job_id = _search_uuid(search_term)
        if job_id is not None:
            return queryset.filter(job_id=job_id), False
        return super().get_search_results(request, queryset, search_term)


@admin.register(JobSchedule)
class JobScheduleAdmin(JobActionsMixin, CheapPaginationMixin, ReadOnlyAdmin):
    job_id_field = "job_id"
    list_display = (
        "job_link",
        "job_type",
        "job_status",
        "priority",
        "position",
        "group_key",
        "assigned_worker_uid",
        "required_worker_uid",
        "paused",
        "execution_id",
        "cancel_requested_at",
    )
    list_filter = ("paused", "execution_mode")
    list_select_related = ("job",)
    ordering = ("group_key", "-priority", "position")
    search_help_text = "A job id, or a worker uid (exact)."
    search_fields = ("group_key",)
    actions = JobActionsMixin.job_actions

    def get_search_results(self, request, queryset, search_term):
        return _ids_search(
            queryset, search_term, int_field=None, uuid_field="job_id", text_fields=("group_key",)
        ), False

    @admin.display(description="job")
    def job_link(self, obj):
        return _job_link(obj.job_id)

    @admin.display(description="type", ordering="job__type")
    def job_type(self, obj):
        return obj.job.type

    @admin.display(description="status", ordering="job__status")
    def job_status(self, obj):
        return obj.job.status


@admin.register(QueueTask)
class QueueTaskAdmin(CheapPaginationMixin, ReadOnlyAdmin):
    # Compact columns (routing in one, short times), so the list fits a 1440-pixel screen beside
    # the navigation and the filters.
    list_display = (
        "id",
        "job_link",
        "stage",
        "state",
        "attempts",
        "routing",
        "claimed_by",
        "started",
        "finished",
    )
    list_filter = (
        choices_filter("state", TASK_STATES),
        choices_filter("pool", POOLS),
        choices_filter("placement", PLACEMENTS),
        choices_filter("resource_category", RESOURCE_CATEGORIES, "resource category"),
    )
    list_select_related = ("job",)
    ordering = ("-id",)
    search_fields = ("task_type",)
    search_help_text = "A task id, a job id, or a worker uid (exact)."
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "job",
                    "execution_id",
                    "task_type",
                    "state",
                    "payload",
                    "parent_task",
                    "dedupe_key",
                    "wait_for_siblings",
                    "result",
                    "last_failure",
                )
            },
        ),
        ("Routing", {"fields": ("placement", "pool", "resource_category", "vram_mb", "target_worker_uid")}),
        (
            "Retries",
            {"fields": ("attempt", "max_attempts", "available_at", "timeout_seconds", "deadline_at")},
        ),
        (
            "Lease and fencing",
            {
                "fields": (
                    "claimed_by",
                    "claimed_worker_session_id",
                    "claimed_reservation_id",
                    "lease_token",
                    "lease_expires_at",
                    "heartbeat_at",
                )
            },
        ),
        ("Progress", {"fields": ("progress", "progress_detail", "created_at", "started_at", "finished_at")}),
    )

    def get_search_results(self, request, queryset, search_term):
        return _ids_search(
            queryset, search_term, int_field="id", uuid_field="job_id", text_fields=("claimed_by",)
        ), False

    @admin.display(description="job")
    def job_link(self, obj):
        return _job_link(obj.job_id)

    @admin.display(description="attempt")
    def attempts(self, obj):
        return f"{obj.attempt}/{obj.max_attempts}"

    @admin.display(description="task type", ordering="task_type")
    def stage(self, obj):
        # May wrap after a dot (transcode.<wbr>rendition), never inside a word.
        return format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in obj.task_type.split(".")))

    @admin.display(description="placement · pool · category")
    def routing(self, obj):
        return f"{obj.placement} · {obj.pool} · {obj.resource_category}"

    @admin.display(description="started", ordering="started_at")
    def started(self, obj):
        return _short_time(obj.started_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, obj):
        return _short_time(obj.finished_at)


def _short_time(moment):
    """'Dec 1 14:27:03' (UTC), '-' for none: the default date format takes a column of its own."""
    if moment is None:
        return "-"
    return format_html('<span title="{}">{}</span>', moment.isoformat(), moment.strftime("%b %-d %H:%M:%S"))


@admin.register(TaskLog)
class TaskLogAdmin(CheapPaginationMixin, ReadOnlyAdmin):
    list_display = ("id", "task_id", "task_type", "at", "short_message")
    list_select_related = ("task",)
    ordering = ("-id",)
    search_fields = ("task__id",)
    search_help_text = "A task id (exact)."

    def get_search_results(self, request, queryset, search_term):
        return _ids_search(queryset, search_term, int_field="task_id", uuid_field="task__job_id"), False

    @admin.display(description="stage")
    def task_type(self, obj):
        return obj.task.task_type

    @admin.display(description="message")
    def short_message(self, obj):
        return obj.message[:160]


@admin.register(FenceAudit)
class FenceAuditAdmin(CheapPaginationMixin, ReadOnlyAdmin):
    list_display = (
        "id",
        "at",
        "task_id",
        "job_link",
        "operation",
        "accepted",
        "reason",
        "worker_uid",
        "attempt",
        "execution_id",
    )
    list_filter = ("accepted",)
    ordering = ("-id",)
    search_fields = ("task_id",)
    search_help_text = "A task id or a job id (exact)."

    def get_search_results(self, request, queryset, search_term):
        return _ids_search(queryset, search_term, int_field="task_id", uuid_field="job_id"), False

    @admin.display(description="job")
    def job_link(self, obj):
        return _job_link(obj.job_id)


@admin.register(QueueWorker)
class QueueWorkerAdmin(ReadOnlyAdmin):
    list_display = (
        "uid",
        "lifecycle",
        "hostname",
        "pid",
        "version",
        "concurrency",
        "background_slots",
        "category_limits",
        "vram_total_mb",
        "last_heartbeat_at",
        "dashboard",
    )
    list_filter = (choices_filter("lifecycle", LIFECYCLES),)
    search_fields = ("uid", "hostname")
    ordering = ("uid",)
    actions = ["drain_workers", "evacuate_workers"]

    def has_operate_permission(self, request) -> bool:
        return can_operate(request.user)

    @admin.display(description="dashboard")
    def dashboard(self, obj):
        return format_html('<a href="{}">open</a>', reverse("dashboard:worker", args=[obj.uid]))

    @admin.action(
        description="Drain selected workers (finish running work, claim nothing new)", permissions=["operate"]
    )
    def drain_workers(self, request, queryset):
        drained, refused = [], []
        for uid in queryset.values_list("uid", flat=True):
            try:
                repository.drain_worker(uid)
            except (repository.ActionNotAllowed, repository.JobNotFound) as exc:
                refused.append(f"{uid}: {exc}")
            else:
                drained.append(uid)
        if drained:
            self.message_user(request, "Draining: " + ", ".join(drained), messages.SUCCESS)
        if refused:
            self.message_user(request, "Refused: " + "; ".join(refused), messages.WARNING)

    @admin.action(
        description="Evacuate selected workers (drain, and move every pinned job to other workers now)",
        permissions=["operate"],
    )
    def evacuate_workers(self, request, queryset):
        evacuated, refused = [], []
        for uid in queryset.values_list("uid", flat=True):
            try:
                moved = repository.evacuate_worker(uid)
            except (repository.ActionNotAllowed, repository.JobNotFound) as exc:
                refused.append(f"{uid}: {exc}")
            else:
                evacuated.append(f"{uid} ({moved} job(s) moved)")
        if evacuated:
            self.message_user(request, "Evacuated: " + ", ".join(evacuated), messages.SUCCESS)
        if refused:
            self.message_user(request, "Refused: " + "; ".join(refused), messages.WARNING)


@admin.register(QueueReservation)
class QueueReservationAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job_link",
        "state",
        "worker_uid",
        "generation",
        "provision_attempts",
        "last_error",
        "requested_at",
        "bound_at",
        "ended_at",
    )
    list_filter = (choices_filter("state", RESERVATION_STATES),)
    search_fields = ("worker_uid",)
    ordering = ("-created_at",)

    @admin.display(description="job")
    def job_link(self, obj):
        return _job_link(obj.job_id)


@admin.register(SchedulerState)
class SchedulerStateAdmin(ReadOnlyAdmin):
    list_display = ("id", "rebalances", "last_recovery_at", "updated_at")


@admin.register(QueueSample)
class QueueSampleAdmin(CheapPaginationMixin, ReadOnlyAdmin):
    list_display = (
        "at",
        "pending",
        "running",
        "retry_wait",
        "paused",
        "completed",
        "failed",
        "stages_completed",
    )
    ordering = ("-at",)
