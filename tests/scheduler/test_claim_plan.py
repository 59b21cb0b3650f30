"""The claim uses indexes, not a sequential scan of queue_tasks, with 100,000 pending tasks."""

import pytest
from django.db import connection, transaction

from scheduler import repository
from tests.kit.db import one, sql

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(240)]


def _scans(table):
    return sql("SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relname = %s", [table])[0]


def test_the_claim_walks_indexes_with_100k_pending_tasks(make_worker_row):
    # 100,000 jobs over 21 priorities, a fifth of them targeted at one of ten workers. Bulk inserts
    # (test setup only) followed by the same refresh every transition runs.
    sql(
        """INSERT INTO jobs (id, type, params, status, priority, max_attempts, hardware, progress, log,
                             manual_retry_count, created_at, updated_at)
           SELECT gen_random_uuid(), 'noop', '{}', 'pending', (i %% 21) - 10, 4, 'auto', 0, '', 0, now(), now()
             FROM generate_series(1, 100000) i"""
    )
    sql(
        """INSERT INTO job_schedule (job_id, execution_id, priority, position, required_worker_uid, execution_mode,
                                     paused, required_vram_mb, updated_at, media_runnable_at, media_categories, media_min_vram)
           SELECT id, 1, priority, nextval('job_position_seq') * 1024,
                  CASE WHEN random() < 0.2 THEN 'w' || floor(random() * 10)::int END, 'shared', false, 0, now(),
                  now(), '["cpu"]', 0
             FROM jobs"""
    )
    sql(
        """INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, dedupe_key, wait_for_siblings, placement,
                                    pool, resource_category, vram_mb, state, available_at, attempt, max_attempts,
                                    timeout_seconds, progress, progress_detail, created_at)
           SELECT id, 1, 'noop', '{}', dedupe_key_v1('dispatch', '{"execution": 1}'), false, 'dispatch', 'media', 'cpu', 0,
                  'pending', now(), 0, 4, 600, 0, '{}', now()
             FROM jobs"""
    )
    sql("ANALYZE queue_tasks; ANALYZE job_schedule; ANALYZE queue_workers")
    assert one("SELECT count(*) FROM queue_tasks WHERE state = 'pending'") == 100000
    worker = make_worker_row("w3", concurrency=4)
    with transaction.atomic():
        before = {t: _scans(t) for t in ("queue_tasks", "job_schedule")}
        task = repository.claim(*worker, "media", 30)
        after = {t: _scans(t) for t in ("queue_tasks", "job_schedule")}
        plan = "\n".join(
            r[0]
            for r in sql(
                """EXPLAIN (SELECT js.job_id FROM job_schedule js WHERE js.group_key = 'w3' AND js.media_runnable_at IS NOT NULL
                            ORDER BY js.priority DESC, js.position, js.media_runnable_at, js.job_id)
                   UNION ALL
                   (SELECT js.job_id FROM job_schedule js WHERE js.group_key = '' AND js.media_runnable_at IS NOT NULL
                    ORDER BY js.priority DESC, js.position, js.media_runnable_at, js.job_id) LIMIT 1"""
            )
        )
        print(plan)
    assert task is not None and task.job_id
    for table in ("queue_tasks", "job_schedule"):
        assert after[table][0] == before[table][0], f"sequential scan of {table} during the claim"
        assert after[table][1] > before[table][1], f"no index scan of {table} during the claim"
    assert "schedule_claim_media" in plan
    assert connection.vendor == "postgresql"
