"""Eight concurrent claimers over 2,000 tasks: each task claimed once per attempt, and neither the
capacity guard nor the VRAM budget is ever exceeded."""

import threading
from collections import Counter

import pytest
from django.db import connection

from scheduler import repository
from tests.kit.db import one, sql

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

TASKS = 2000
SLOTS_PER_WORKER = 4
VRAM_TOTAL = 6000
GPU_VRAM = 2500


def test_concurrent_claimers_never_double_claim_or_overcommit(make_worker_row, enqueue):
    sql(
        "SELECT enqueue_job_v1('noop', '{}', (i %% 7) - 3, 4, NULL, NULL, 'auto', NULL, NULL, NULL, 0, 600, NULL, 60, false) "
        "FROM generate_series(1, %s) i",
        [TASKS],
    )
    # Every fourth dispatch needs a GPU encoder slot and 2,500 MB of VRAM (test setup only).
    sql("UPDATE queue_tasks SET resource_category = 'gpu_encode', vram_mb = %s WHERE id %% 4 = 0", [GPU_VRAM])
    sql("SELECT refresh_job_v1(job_id) FROM job_schedule")
    workers = [
        make_worker_row(
            f"w{i}", concurrency=SLOTS_PER_WORKER, limits={"cpu": 4, "gpu_encode": 2}, vram=VRAM_TOTAL
        )
        for i in range(2)
    ]
    lock = threading.Lock()
    in_flight = {uid: {} for uid, _ in workers}  # uid -> {task_id: vram}
    claims = Counter()
    violations = []

    def slot(worker):
        uid, session = worker
        try:
            while True:
                task = repository.claim(uid, session, "media", 60)
                if task is None:
                    if one("SELECT count(*) FROM queue_tasks WHERE state IN ('pending', 'retry_wait')") == 0:
                        return
                    continue
                with lock:
                    claims[(task.id, task.attempt)] += 1
                    mine = in_flight[uid]
                    mine[task.id] = task.vram_mb
                    gpu = sum(1 for v in mine.values() if v)
                    if len(mine) > SLOTS_PER_WORKER or sum(mine.values()) > VRAM_TOTAL or gpu > 2:
                        violations.append((uid, dict(mine)))
                with lock:
                    del in_flight[uid][task.id]  # leaves the set before the finish commits
                lease = repository.Lease.of(task, uid, session)
                assert repository.finish(lease).outcome == "completed"
        finally:
            connection.close()

    threads = [threading.Thread(target=slot, args=(w,)) for w in workers for _ in range(SLOTS_PER_WORKER)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(170)
    assert not violations
    assert len(claims) == TASKS and set(claims.values()) == {1}
    assert one("SELECT count(*) FROM queue_tasks WHERE state = 'completed'") == TASKS
    assert one("SELECT count(*) FROM queue_fence_audit WHERE operation = 'finish' AND accepted") == TASKS
    assert one("SELECT count(DISTINCT claimed_by) FROM queue_tasks") == 2
