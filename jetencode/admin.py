"""Django admin for jobs, outputs, the media library and API tokens.

Jobs are queue state: the admin shows them read-only and changes them only through actions that
call `scheduler.repository` (cancel, retry, pause, resume, redispatch), each ending in
`message_user` with what happened and what was refused and why. Big tables use `CheapPaginator`
(no COUNT(*)) and fixed-choice filters (no SELECT DISTINCT over the table).
"""

from __future__ import annotations

import secrets
import uuid

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from jetencode.models import ApiToken, Job, JobOutput, MediaAsset, hash_token
from jetencode.permissions import can_operate
from media.jobtypes import JOB_TYPES
from media.probe import ASSET_FIELDS
from scheduler import repository

MAX_ACTION_ROWS = 500
LOOKAHEAD_PAGES = 5


class CheapPaginator(Paginator):
    """Counts at most a few pages past the one shown, by fetching primary keys with LIMIT: the admin
    never runs COUNT(*) over a table of millions of rows. The count it reports is exact once the end
    is within reach, else a lower bound (enough for the next pages' links)."""

    def __init__(self, *args, page_number: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.page_number = page_number

    @cached_property
    def count(self) -> int:
        offset = (self.page_number - 1) * self.per_page
        limit = offset + LOOKAHEAD_PAGES * self.per_page + 1
        return offset + len(self.object_list.values_list("pk", flat=True)[offset:limit])


class CheapPaginationMixin:
    """For admins of big tables: the cheap paginator and no full count."""

    paginator = CheapPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        try:
            number = max(1, int(request.GET.get("p", "1")))
        except ValueError:
            number = 1
        return self.paginator(queryset, per_page, orphans, allow_empty_first_page, page_number=number)


def choices_filter(field: str, values, title: str | None = None) -> type[admin.SimpleListFilter]:
    """A list filter with a fixed set of values (the default one runs SELECT DISTINCT on the table)."""

    class FixedChoices(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request, model_admin):
            return [(value, value.replace("_", " ")) for value in values]

        def queryset(self, request, queryset):
            return queryset.filter(**{field: self.value()}) if self.value() else queryset

    FixedChoices.title = title or field.replace("_", " ")
    FixedChoices.__name__ = f"{field.title().replace('_', '')}Filter"
    return FixedChoices


class ReadOnlyAdmin(admin.ModelAdmin):
    """Queue state is written by the scheduler's repository only: view it, act through actions."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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

    job_actions = ["cancel_jobs", "retry_jobs", "pause_jobs", "resume_jobs", "redispatch_jobs"]


def _search_uuid(term: str):
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


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
    list_filter = ("status", choices_filter("type", sorted(JOB_TYPES)), "hardware", "created_at")
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
        from media.submission import ValidationError, create_job

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


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are stored hashed: the raw value is shown once, in the message after adding one."""

    list_display = ("prefix", "user", "name", "scope", "created_at", "last_used_at", "revoked")
    list_filter = ("scope", "revoked")
    search_fields = ("prefix", "name", "user__username")
    list_select_related = ("user",)
    readonly_fields = ("prefix", "created_at", "last_used_at")
    actions = ["revoke_tokens"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "name", "scope")
        return ("user", "name", "scope", "revoked", "prefix", "created_at", "last_used_at")

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields + (("user",) if obj is not None else ())

    def save_model(self, request, obj, form, change):
        if not change:
            raw = "jet_" + secrets.token_urlsafe(32)
            obj.token_hash = hash_token(raw)
            obj.prefix = raw[:12]
            super().save_model(request, obj, form, change)
            self.message_user(
                request,
                f"New {obj.scope} token for {obj.user}: {raw} — copy it now, it is not shown again.",
                messages.WARNING,
            )
            return
        super().save_model(request, obj, form, change)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset):
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"Revoked {count} token{'s' if count != 1 else ''}.", messages.SUCCESS)
