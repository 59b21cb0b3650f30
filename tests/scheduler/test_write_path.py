"""What the write path's speed relies on, pinned down so it cannot quietly regress.

The enqueue and the claim write a job's derived columns themselves instead of running the general
refresh_job_v1 (a full refresh afterwards must change nothing); the write-path helpers are PL/pgSQL (plans kept per session) rather than SQL functions re-planned on every call;
the hot functions plan without sequential scans (docs/benchmarks.md).
"""

import pytest

from scheduler import repository
from tests.kit.db import claim, lease_of, make_available, one, sql

pytestmark = pytest.mark.django_db

DERIVED = """
SELECT j.status, j.progress, j.started_at, j.finished_at, s.media_runnable_at, s.media_categories,
       s.media_min_vram, s.background_runnable_at, s.assigned_worker_uid
  FROM jobs j JOIN job_schedule s ON s.job_id = j.id WHERE j.id = %s
"""


def assert_refresh_changes_nothing(job):
    written = sql(DERIVED, [job])
    sql("SELECT refresh_job_v1(%s)", [job])
    assert sql(DERIVED, [job]) == written


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"priority": 7, "hardware": "gpu", "resource_category": "gpu_encode", "vram_mb": 2048},
        {"required_category": "gpu_ai", "required_vram_mb": 4096},
    ],
)
def test_a_new_jobs_derived_columns_are_what_a_full_refresh_computes(enqueue, kwargs):
    job = enqueue("noop", {"seconds": 0}, **kwargs)
    written = sql(DERIVED, [job])
    assert written[0][0] == "pending" and written[0][4] is not None
    assert_refresh_changes_nothing(job)


def test_a_new_jobs_log_has_its_creation_line(enqueue, make_worker_row):
    uid, _ = make_worker_row("w-log")
    job = enqueue("noop", {"seconds": 0}, required_worker_uid=uid)
    log = one("SELECT log FROM jobs WHERE id = %s", [job])
    assert log.endswith(f"Z created noop for worker {uid}\n") and log.count("\n") == 1


def test_the_new_job_is_claimable_at_once(enqueue, make_worker_row):
    worker = make_worker_row()
    job = enqueue()
    assert claim(worker).job_id == job


def test_claiming_a_dispatch_writes_what_a_full_refresh_computes(enqueue, make_worker_row):
    worker = make_worker_row("w-claim")
    job = enqueue()
    claim(worker)
    assert one("SELECT assigned_worker_uid FROM job_schedule WHERE job_id = %s", [job]) == "w-claim"
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "running"
    assert one("SELECT media_runnable_at FROM job_schedule WHERE job_id = %s", [job]) is None
    assert_refresh_changes_nothing(job)


def test_claiming_one_of_several_stages_leaves_the_rest_runnable(enqueue, make_worker_row):
    worker = make_worker_row(concurrency=8, limits={"cpu": 8, "gpu_encode": 2}, vram=8000)
    job = enqueue()
    dispatch = claim(worker)
    children = [
        repository.Child("noop", {"n": 1}),
        repository.Child("noop", {"n": 2}, resource_category="gpu_encode", vram_mb=3000),
        repository.Child("noop", {"n": 3}, pool="background"),
        repository.Child("noop", {"n": 4}, wait_for_siblings=True),
    ]
    assert repository.finish(lease_of(dispatch, worker), children=children).outcome == "completed"
    assert_refresh_changes_nothing(job)
    # Within a job, stages are claimed in creation order; the background one and the one that waits
    # for its siblings are not media work yet.
    first = claim(worker)
    assert first.payload["n"] == 1
    assert one("SELECT media_runnable_at FROM job_schedule WHERE job_id = %s", [job]) is not None
    assert_refresh_changes_nothing(job)
    assert claim(worker).payload["n"] == 2
    assert one("SELECT media_runnable_at FROM job_schedule WHERE job_id = %s", [job]) is None
    assert_refresh_changes_nothing(job)
    background = claim(worker, pool="background")
    assert background.payload["n"] == 3
    assert one("SELECT background_runnable_at FROM job_schedule WHERE job_id = %s", [job]) is None
    assert_refresh_changes_nothing(job)


def test_claiming_a_retry_keeps_the_jobs_progress_and_log(enqueue, make_worker_row):
    worker = make_worker_row()
    job = enqueue(max_attempts=3)
    task = claim(worker)
    repository.report_progress(lease_of(task, worker), 40)
    assert repository.fail(lease_of(task, worker), "boom").outcome == "retry_wait"
    make_available(task.id)
    retried = claim(worker)
    assert retried.id == task.id and retried.attempt == 2
    assert one("SELECT progress FROM jobs WHERE id = %s", [job]) == 40
    assert (
        one("SELECT log FROM jobs WHERE id = %s", [job])
        .rstrip()
        .endswith(f"noop claimed by {worker[0]} (attempt 2/3)")
    )
    assert_refresh_changes_nothing(job)


def test_claiming_a_webhook_leaves_the_job_alone(enqueue, make_worker_row):
    worker = make_worker_row()
    job = enqueue(webhook_url="https://example.com/hook")
    repository.finish(lease_of(claim(worker), worker))
    before = sql("SELECT status, log, updated_at FROM jobs WHERE id = %s", [job])
    webhook = claim(worker, pool="background")
    assert webhook.task_type == "webhook" and webhook.job_type == "noop"
    assert sql("SELECT status, log, updated_at FROM jobs WHERE id = %s", [job]) == before
    assert_refresh_changes_nothing(job)


def test_write_helpers_are_plpgsql_not_replanned_sql_functions():
    # A LANGUAGE sql function that writes cannot be inlined, so PostgreSQL parses and plans its
    # body on every call; PL/pgSQL keeps the plan for the session.
    replanned = sql(
        """SELECT p.proname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.proname ~ '_v[0-9]+$' AND l.lanname = 'sql'
              AND p.prosrc ~* '\\m(insert|update|delete)\\M'
              AND p.proname NOT IN ('set_session_lifecycle_v1', 'mark_stale_workers_v1',
                                    'rebalance_group_v1')"""
    )
    assert replanned == []


def test_the_hot_path_never_plans_a_sequential_scan():
    hot = [
        "claim_task_v1",
        "refresh_job_v1",
        "enqueue_job_v1",
        "finish_task_v1",
        "lock_for_fenced_write_v1",
        "report_progress_v1",
        "fail_task_v1",
        "release_task_v1",
        "heartbeat_tasks_v1",
    ]
    settings = dict(sql("SELECT proname, proconfig FROM pg_proc WHERE proname = ANY (%s)", [hot]))
    assert sorted(settings) == sorted(hot)
    for name, config in settings.items():
        assert "enable_seqscan=off" in (config or []), name


def test_a_stage_from_empty_statistics_does_not_scan_whole_tables(enqueue, make_worker_row):
    # Statistics that say the queue is empty used to turn every lookup into a sequential scan.
    sql("ANALYZE jobs; ANALYZE job_schedule; ANALYZE queue_tasks; ANALYZE queue_workers")
    worker = make_worker_row()
    job = enqueue()
    before = one(
        "SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables WHERE relname = 'queue_tasks'"
    )
    task = claim(worker)
    repository.finish(repository.Lease.of(task, *worker))
    after = one(
        "SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_xact_user_tables WHERE relname = 'queue_tasks'"
    )
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "completed"
    assert after == before
