"""A stage timeout stops its handler (issue 18 item 3): at the context's next checkpoint, or — for a
handler that ignores its context — by the supervisor, which kills its subprocesses, records the
timeout and frees the slot (the Python thread itself cannot be killed; it is left to end). And a
normal restart logs the fencing of the previous session at INFO; a live one at WARNING."""

import signal
from pathlib import Path

import pytest

from tests.kit.db import one
from tests.kit.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]

STUBBORN = Path(__file__).resolve().with_name("stubborn_stages.py")


@pytest.fixture
def worker_env(worker_env):
    return {
        **worker_env,
        "JETENCODE_EXTRA_STAGE_MODULES": f"{worker_env['JETENCODE_EXTRA_STAGE_MODULES']},{STUBBORN}",
    }


def dispatch(job):
    return one(
        "SELECT ARRAY[state, coalesce(last_failure, '')] FROM queue_tasks WHERE job_id = %s AND placement = 'dispatch'",
        [job],
    )


def test_a_timeout_stops_a_handler_at_its_next_checkpoint(start_worker, enqueue):
    worker = start_worker("timeout-coop", "--concurrency", "1")
    job = enqueue("test.checkpoints", {"seconds": 60}, timeout_seconds=4, max_attempts=1)
    wait_for(lambda: dispatch(job)[0] == "failed", 20, "the timed-out stage to fail", workers=[worker])
    assert dispatch(job)[1].startswith("StageTimeout"), dispatch(job)
    assert "did not stop after its timeout" not in worker.output()
    assert one("SELECT count(*) FROM queue_fence_audit WHERE job_id = %s AND NOT accepted", [job]) == 0
    assert worker.drain() == 0


def test_a_handler_that_ignores_its_context_is_timed_out_and_its_slot_freed(start_worker, enqueue):
    worker = start_worker("timeout-stubborn", "--concurrency", "1")
    job = enqueue("test.stubborn", {"seconds": 40}, timeout_seconds=4, max_attempts=1)
    wait_for(lambda: dispatch(job)[0] == "failed", 20, "the stubborn stage to be failed", workers=[worker])
    state, failure = dispatch(job)
    assert failure.startswith("StageTimeout"), failure
    assert "did not stop after its timeout" in worker.output()
    # The fail came from the worker in time (the lease was still its own), not from recovery.
    assert (
        one(
            "SELECT count(*) FROM queue_fence_audit WHERE job_id = %s AND operation = 'fail' AND accepted",
            [job],
        )
        == 1
    )
    # Its one slot is free although the handler's thread still sleeps: the next job runs now.
    after = enqueue("noop", {"seconds": 0})
    wait_for(
        lambda: dispatch(after)[0] == "completed", 10, "the next job on the freed slot", workers=[worker]
    )
    # A drain does not wait for the abandoned thread.
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0


def test_a_restart_logs_the_stopped_session_as_routine_and_a_live_one_at_warning(start_worker):
    first = start_worker("restarted")
    first_session = first.session()
    assert first.drain() == 0
    second = start_worker("restarted")
    # A clean restart reads as one: no "fenced out", nothing above INFO.
    assert "fenced out" not in second.output(), second.output()
    [line] = [line for line in second.output().splitlines() if "restarted (previous session" in line]
    assert " INFO " in line and str(first_session) in line, line
    third = start_worker("restarted")  # while the second is alive and beating
    [line] = [line for line in third.output().splitlines() if "fenced out now" in line]
    assert "WARNING" in line and "still heartbeating" in line, line
    assert second.wait(20) == 3  # uid taken over
    assert third.drain() == 0
