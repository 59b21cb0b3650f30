"""Request and response schemas. Inputs are strict and bounded (DECISIONS 14); outputs say exactly
what the endpoints return, so the OpenAPI document can be checked against real responses."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    model_serializer,
)

from media import submission
from media.jobtypes import JOB_TYPES
from scheduler.constants import (
    HARDWARE_CHOICES,
    JOB_STATUSES,
    LIFECYCLES,
    MAX_VRAM_MB,
    PLACEMENTS,
    POOLS,
    QUEUE_STATUSES,
    RESERVATION_STATES,
    RESOURCE_CATEGORIES,
    TASK_STATES,
)

Hardware = Literal[HARDWARE_CHOICES]
ResourceCategory = Literal[RESOURCE_CATEGORIES]
JobStatus = Literal[JOB_STATUSES]
QueueState = Literal[QUEUE_STATUSES]
TaskState = Literal[TASK_STATES]
Lifecycle = Literal[LIFECYCLES]
Placement = Literal[PLACEMENTS]
Pool = Literal[POOLS]
ReservationState = Literal[RESERVATION_STATES]
Direction = Literal["up", "down", "top", "bottom"]


def _whole_number(value: Any) -> Any:
    # JSON has one number type: 152.0 is the integer 152 (JSON Schema says so); 152.5 stays a float
    # and is refused by the strict check after this. Booleans and strings are never numbers here.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# An integer as JSON Schema means it: a number with no fractional part (152 or 152.0).
JsonInt = Annotated[int, BeforeValidator(_whole_number), Strict()]


def _storable(value: str) -> str:
    problem = submission.text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A string PostgreSQL can store (no NUL, no lone surrogates). The schema says so too (`pattern`),
# so a request the OpenAPI document calls valid is never refused for a NUL.
NO_NUL = "^[^\\u0000]*$"
Text = Annotated[str, AfterValidator(_storable), WithJsonSchema({"type": "string", "pattern": NO_NUL})]
# Lists page by offset, which reads and drops every row before the page: the declared bounds keep
# it at most (MAX_PAGE - 1) x MAX_LIMIT = 250,000 rows (about what each page's count reads), so no
# request the schema calls valid is refused for its depth; /v2/jobs also pages by cursor.
MAX_PAGE = 501
MAX_LIMIT = 500


# ---- requests ---------------------------------------------------------------------------------


# What the schema declares of a webhook URL: a subset of what media.webhooks accepts (http or https,
# a plain host name, no credentials, port or control characters). Whether the host resolves to a
# public address is known only when the request comes.
WEBHOOK_URL_PATTERN = (
    "^[hH][tT][tT][pP][sS]?://[A-Za-z0-9][A-Za-z0-9.-]{0,252}(/[^\\u0000-\\u0020\\u007f]*)?$"
)


class JobIn(Schema):
    # The one rule between fields, said in the schema too (media.jobtypes checks it): a cpu override
    # needs no VRAM.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {"required": ["resource_category"], "properties": {"resource_category": {"const": "cpu"}}},
            "then": {"properties": {"vram_mb": {"enum": [0, None]}}},
        },
    )

    type: Text = Field(
        ...,
        min_length=1,
        max_length=64,
        description="Job type. `GET /v2/job-types` lists them with their params schemas.",
        json_schema_extra={"enum": sorted(JOB_TYPES)},
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Parameters of the job type (see its params_schema)."
    )
    priority: JsonInt = Field(0, ge=-1000, le=1000, description="Higher runs first.")
    required_worker_uid: Text | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Run every stage on this worker. It must be active and fresh now (not draining).",
    )
    max_attempts: JsonInt = Field(4, ge=1, le=20, description="Attempts per stage before the job fails.")
    webhook_url: (
        Annotated[
            str, AfterValidator(_storable), WithJsonSchema({"type": "string", "pattern": WEBHOOK_URL_PATTERN})
        ]
        | None
    ) = Field(
        None,
        max_length=2048,
        description="POSTed (Standard Webhooks signature) when the job completes, fails or is cancelled. "
        "Loopback, private and link-local targets are refused unless JETENCODE_WEBHOOK_ALLOW_PRIVATE.",
    )
    hardware: Hardware = Field(
        "auto",
        description="auto: GPU when the dispatching worker has a usable encoder; "
        "gpu: only workers with the GPU category may take it; cpu: never a GPU.",
    )
    resource_category: ResourceCategory | None = Field(
        None, description="Override the category of GPU-capable stages."
    )
    # Said outright: in an optional field pydantic writes the bounds as `ge`/`le`, which JSON Schema
    # does not know, and a client or schemathesis would think any integer valid.
    vram_mb: (
        Annotated[
            JsonInt,
            Field(ge=0, le=MAX_VRAM_MB),
            WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_VRAM_MB}),
        ]
        | None
    ) = Field(None, description="Override the VRAM those stages need.")


class PriorityIn(Schema):
    model_config = ConfigDict(extra="forbid")
    priority: JsonInt = Field(..., ge=-1000, le=1000)


class MoveIn(Schema):
    model_config = ConfigDict(extra="forbid")
    direction: Direction


# ---- responses --------------------------------------------------------------------------------


class PaginationOut(Schema):
    page: int
    limit: int
    total: int
    total_pages: int


class JobPaginationOut(PaginationOut):
    next_cursor: str | None = Field(
        None,
        description="Pass as `cursor` for the next page, which costs the same however deep (null on the last one)",
    )


class ReservationOut(Schema):
    id: UUID = Field(description="The reservation id: a provisioner starts `runworker --reservation ID`")
    job_id: UUID | None
    state: ReservationState = Field(
        description="requested (waiting for a worker), bound (a worker holds it), released (ended: the job "
        "finished, or it went back to shared execution), failed (nobody bound it in time: the job runs shared)"
    )
    worker_uid: str | None = Field(description="The bound worker (while bound)")
    generation: int = Field(
        description="How many times a worker bound it; a rebind after a lost worker is the next"
    )
    last_error: str = Field(
        description="Why it waits or ended: the provisioner's exit and last stderr line, a lost worker"
    )
    provision_attempts: int = Field(description="Provisioner runs since it was last requested")
    created_at: datetime
    requested_at: datetime | None = Field(description="Since when it waits for a worker")
    bound_at: datetime | None
    ended_at: datetime | None
    updated_at: datetime


class QueueChunksOut(Schema):
    total: int
    done: int
    running: dict[str, int] = Field(description="Worker uid: chunks running there")


class QueueEntryOut(Schema):
    job_id: UUID
    type: str
    group: str | None = Field(
        description="Worker uid whose claims see this job first (assigned, else targeted); null = pending group"
    )
    stage: str | None = Field(description="Task type of the representative task")
    state: JobStatus = Field(description="The job's status")
    task_state: TaskState | None
    priority: int
    position: int
    required_worker_uid: str | None
    assigned_worker_uid: str | None
    paused: bool
    attempt: int | None
    max_attempts: int | None
    waiting_seconds: float | None = Field(
        None, description="Present only while the job is pending: seconds since its next task became runnable"
    )
    available_at: datetime | None
    can_retry: bool
    waiting_reason: str | None = Field(
        description="Why a waiting job is not running (null when it is not waiting)"
    )
    progress: int
    created_at: datetime
    cancel_requested: bool
    resource_category: ResourceCategory | None
    vram_mb: int | None
    reservation: ReservationOut | None = Field(
        None, description="A dedicated job's reservation (POST /v2/queue/{id}/dedicate); null for shared jobs"
    )
    chunks: QueueChunksOut | None = Field(
        None,
        description="Present only for a split transcode: its chunks, how many are done, how many run on which worker",
    )

    @model_serializer(mode="wrap")
    def _omit_waiting_seconds(self, handler):
        data = handler(self)
        if data.get("waiting_seconds") is None:
            data.pop("waiting_seconds", None)
        if data.get("chunks") is None:
            data.pop("chunks", None)  # only a split job has chunks
        return data


class QueuePageOut(Schema):
    data: list[QueueEntryOut]
    pagination: PaginationOut


class JobSummaryOut(Schema):
    id: UUID
    type: str
    status: JobStatus
    progress: int
    priority: int = Field(description="The live priority (operators may have changed it)")
    max_attempts: int
    hardware: Hardware
    resource_category: ResourceCategory | None = Field(description="Category override given at creation")
    vram_mb: int | None = Field(description="VRAM override given at creation")
    required_worker_uid: str | None
    assigned_worker_uid: str | None
    webhook_url: str | None
    last_error: str | None = Field(
        description="Why the job failed, in one line (the stage and its message); the traceback is in the task history"
    )
    manual_retry_count: int
    created_by: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobPageOut(Schema):
    data: list[JobSummaryOut]
    pagination: JobPaginationOut


class StageOut(Schema):
    id: int
    task_type: str
    placement: Placement
    pool: Pool
    state: TaskState
    progress: float
    attempt: int
    max_attempts: int
    resource_category: ResourceCategory
    vram_mb: int
    worker_uid: str | None = Field(description="The worker that claimed it last")
    available_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_failure: str | None = Field(description="The stage's last failure, in one line")


class OutputOut(Schema):
    name: str
    kind: str
    size_bytes: int
    storage_url: str = Field(description="Where the storage keeps it (file:// or s3://), for operators")
    download_url: str = Field(
        description="GET it here with the same credentials (byte ranges; S3 outputs redirect to a presigned URL)"
    )
    metadata: dict[str, Any]
    task_id: int
    execution_id: int
    created_at: datetime


class SplitChunkOut(Schema):
    index: int
    first_frame: int
    last_frame: int
    start_seconds: float
    end_seconds: float


class SplitOut(Schema):
    mode: str = Field(description='"chunks"')
    reason: str = Field(description="Why the job was split, and how the plan was made")
    chunks: list[SplitChunkOut] = Field(description="Exact frame ranges, the same for every rendition")


class JobDetailOut(JobSummaryOut):
    params: dict[str, Any]
    execution_id: int
    paused: bool
    cancel_requested: bool
    attempt: int | None = Field(description="Attempt of the representative task (see the queue entry)")
    stages: list[StageOut] = Field(description="Stages of the current execution, in creation order")
    outputs: list[OutputOut] = Field(description="Files published by the current execution")
    log_tail: list[str] = Field(description="The last lines of the job log")
    queue: QueueEntryOut | None = Field(description="The job's queue entry while it is in the queue")
    reservation: ReservationOut | None = Field(
        None,
        description="The job's latest dedicated-execution reservation, whatever its state; null if never dedicated",
    )
    quality: dict[str, Any] | None = Field(
        None,
        description="Measured quality of the outputs (quality.json: VMAF/PSNR/SSIM per rendition); null until measured",
    )
    split: SplitOut | None = Field(
        None,
        description="The split plan of a split-and-stitch transcode (chunks encoded on any worker); null when "
        "the job was not split",
    )
    progress_note: str | None = Field(
        None, description="Why progress went down (a split job's chunk restarted and gave its frames back)"
    )


class LogLineOut(Schema):
    at: datetime
    message: str


class TaskOut(StageOut):
    last_failure: str | None = Field(
        description="The last failure as the worker recorded it: its message, then the Python traceback"
    )
    execution_id: int
    parent_task_id: int | None
    wait_for_siblings: bool
    payload: dict[str, Any]
    result: Any
    progress_detail: dict[str, Any]
    created_at: datetime
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    deadline_at: datetime | None
    log_tail: list[LogLineOut]


class TaskListOut(Schema):
    job_id: UUID
    data: list[TaskOut]


class JobTypeOut(Schema):
    name: str
    description: str
    resource_category: str
    vram_mb: int
    gpu_path: bool
    stages: list[str]
    outputs: str
    params_schema: dict[str, Any]


class JobTypeListOut(Schema):
    data: list[JobTypeOut]


class PoolUsageOut(Schema):
    capacity: int
    running: int


class ActiveTaskOut(Schema):
    id: int
    job_id: UUID
    job_type: str
    task_type: str
    pool: Pool
    resource_category: ResourceCategory
    vram_mb: int
    attempt: int
    max_attempts: int
    progress: float
    progress_detail: dict[str, Any]
    started_at: datetime | None
    lease_expires_at: datetime | None


class WorkerOut(Schema):
    uid: str
    session_id: UUID | None
    hostname: str
    pid: int | None
    version: str
    lifecycle: Lifecycle = Field(
        description="active | draining | offline (an active worker without recent heartbeats is offline)"
    )
    registered_at: datetime | None
    last_heartbeat_at: datetime | None
    reservation_id: UUID | None
    workspace: str
    media: PoolUsageOut
    background: PoolUsageOut
    categories: dict[str, PoolUsageOut] = Field(description="Media slots per resource category")
    vram_total_mb: int
    vram_used_mb: int
    active_tasks: list[ActiveTaskOut]
    system_sample: dict[str, Any] = Field(description="The worker's latest CPU/memory/disk/GPU sample")
    capabilities: dict[str, Any] = Field(description="Capability catalog (encoders, filters, GPUs)")


class WorkerListOut(Schema):
    data: list[WorkerOut]


class EvacuationOut(Schema):
    jobs_moved: int = Field(description="Jobs pinned to the worker that now run on any other worker")
    worker: WorkerOut


class StatsOut(Schema):
    by_status: dict[str, int]
    running_by_category: dict[str, int]
    vram_used_mb: int
    vram_total_mb: int
    vram_available_mb: int
    avg_processing_seconds_by_type: dict[str, float] = Field(description="Completed in the last 24 hours")
    jobs_by_type: dict[str, int]
    completed_last_hour: int
    failed_last_hour: int
    queue_length: int = Field(description="Entries in GET /v2/queue")


class MemoryOut(Schema):
    total_bytes: int
    available_bytes: int
    used_bytes: int
    percent: float


class DiskOut(Schema):
    path: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    percent: float


class ProcessOut(Schema):
    pid: int
    rss_bytes: int
    cpu_percent: float
    threads: int


class SysinfoOut(Schema):
    sampled_at: datetime
    hostname: str
    cpu_percent: float
    cpu_count: int
    load_average: list[float] | None
    memory: MemoryOut
    disk: DiskOut
    process: ProcessOut


class HealthOut(Schema):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"]
