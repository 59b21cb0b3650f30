"""The claimer's one step, called directly (Healthchecks' habit): what makes it claim, what makes it
ask the lock-free hint first, and that it never claims without a free slot."""

import os
import uuid
from pathlib import Path

import pytest

from scheduler import repository
from tests.kit.db import sql
from workers.config import Timing
from workers.session import Session
from workers.slots import Claimer, Slots

pytestmark = pytest.mark.django_db

TIMING = Timing(
    lease=30.0,
    heartbeat=5.0,
    stale_worker=60.0,
    reassign_after=120.0,
    shutdown_grace=3.0,
    poll=0.5,
    recovery_interval=5.0,
    sample_interval=60.0,
    retention_days=7,
    notify=True,
)


class Started:
    """Stands in for the StageRunner: records what the claimer handed to which slot."""

    def __init__(self, slots: Slots):
        self.slots = slots
        self.tasks: list[tuple[str, repository.ClaimedTask]] = []

    def start(self, slot, task, claimed_at) -> None:
        self.tasks.append((slot, task))


def claimer_for(tmp_path: Path, media: int = 2) -> tuple[Claimer, Started]:
    session = Session(f"step-{uuid.uuid4().hex[:6]}", TIMING, {}, tmp_path)
    repository.register_worker(
        repository.WorkerRegistration(
            uid=session.uid,
            session_id=session.session_id,
            hostname="test",
            pid=os.getpid(),
            version="test",
            concurrency=media,
            background_slots=1,
            category_limits={"cpu": media},
            vram_total_mb=0,
            capabilities={},
            workspace=str(tmp_path),
        )
    )
    slots = Slots(media, 1)
    started = Started(slots)
    return Claimer(session, slots, started, listening=lambda: True), started


def test_the_first_step_looks_in_both_pools_and_then_it_waits_for_a_reason(tmp_path):
    claimer, started = claimer_for(tmp_path)
    assert claimer.step() is False
    assert (claimer.claims, claimer.hints) == (2, 0)  # media and background, nothing there
    assert claimer.step() is False  # no notification, no free-d slot, poll not due: nothing sent
    assert (claimer.claims, claimer.hints) == (2, 0)
    assert started.tasks == []


def test_an_idle_poll_asks_the_hint_and_claims_only_when_it_says_so(tmp_path, enqueue):
    claimer, started = claimer_for(tmp_path)
    claimer.step()
    claimer._next_poll = 0.0  # the poll is due
    assert claimer.step() is False
    assert (claimer.claims, claimer.hints) == (2, 1)  # the hint said nothing: no claim, no lock
    job = enqueue("noop", {"seconds": 0})
    claimer._next_poll = 0.0
    # Just enqueued: its notification went to the worker that should take it; a poll leaves it.
    assert claimer.step() is False
    assert (claimer.claims, claimer.hints) == (2, 2)
    sql("UPDATE job_schedule SET media_runnable_at = now() - interval '1 second' WHERE job_id = %s", [job])
    claimer._next_poll = 0.0
    assert claimer.step() is True  # runnable for a second: a missed notification, the poll takes it
    assert (claimer.claims, claimer.hints) == (3, 3)
    assert [(slot, str(task.job_id)) for slot, task in started.tasks] == [("media-1", str(job))]
    # The claim saw nothing else runnable: the next free slot waits for a reason, sends nothing.
    assert started.tasks[0][1].more_runnable is False
    assert claimer.step() is False
    assert (claimer.claims, claimer.hints) == (3, 3)


def test_a_backlog_is_claimed_slot_after_slot_without_hints(tmp_path, enqueue):
    claimer, started = claimer_for(tmp_path, media=3)
    claimer.step()  # the first look, at an empty queue
    jobs = [enqueue("noop", {"seconds": 0}) for _ in range(4)]
    # A notification to every worker, as when a burst outgrew the farm's free slots: the backlog
    # counts work of any age.
    claimer.session.wakeup.notify("media", everyone=True)
    while claimer.step():  # what the thread does: step again at once after a claim
        pass
    # three slots filled by three claims, each of which saw more waiting; no cheap read needed
    assert [slot for slot, _ in started.tasks] == ["media-1", "media-2", "media-3"]
    assert [task.more_runnable for _, task in started.tasks] == [True, True, True]
    assert claimer.hints == 0
    # a stage finishes and its slot comes free: the backlog is claimed at once, by a claim that sees
    # the queue empty after it
    session = claimer.session
    finished = started.tasks[1][1]
    assert repository.finish(repository.Lease.of(finished, session.uid, session.session_id)).accepted
    claimer.slots.put_back("media", "media-2")
    claimer.session.wakeup.freed("media")
    assert claimer.step() is True
    assert started.tasks[-1][1].more_runnable is False
    assert {str(task.job_id) for _, task in started.tasks} == {str(j) for j in jobs}
    assert claimer.hints == 0


def test_a_notification_claims_at_once_and_a_full_worker_claims_nothing(tmp_path, enqueue):
    claimer, started = claimer_for(tmp_path, media=1)
    claimer.step()
    enqueue("noop", {"seconds": 0})
    claimer.session.wakeup.notify("media")
    assert claimer.step() is True
    assert (claimer.claims, claimer.hints) == (3, 0)  # claimed without asking first
    assert claimer.slots.free("media") == 0
    enqueue("noop", {"seconds": 0})
    claimer.session.wakeup.notify("media")
    claimer._next_poll = 0.0
    assert claimer.step() is False  # its one media slot is busy: no claim, whatever arrives
    assert claimer.claims == 3 and len(started.tasks) == 1


def test_a_finish_that_spawns_children_fills_every_free_slot_at_once(tmp_path, enqueue):
    """One notification announces all the children of a finish (a transcode's renditions); the
    claims that take them say more of the job is runnable, so the free slots fill without waiting
    for a poll, and the claim that takes the last says so."""
    claimer, started = claimer_for(tmp_path, media=3)
    claimer.step()
    enqueue("noop", {"seconds": 0})
    claimer.session.wakeup.notify("media")
    assert claimer.step() is True
    dispatch = started.tasks[0][1]
    session = claimer.session
    children = [repository.Child("noop", {"n": i}) for i in range(3)]
    lease = repository.Lease.of(dispatch, session.uid, session.session_id)
    assert repository.finish(lease, None, children).outcome == "completed"
    claimer.slots.put_back("media", started.tasks[0][0])
    claimer.session.wakeup.notify("media")  # one notification for the three
    while claimer.step():
        pass
    claimed = [task for _, task in started.tasks[1:]]
    assert sorted(t.payload["n"] for t in claimed) == [0, 1, 2]
    assert [t.more_runnable for t in claimed] == [True, True, False]
    assert claimer.hints == 0


def test_each_notification_is_answered_by_one_claim(tmp_path, enqueue):
    """Four jobs enqueued in one transaction for this worker: four notifications, four claims at
    once (the jobs are too young for the backlog flag: offered to this worker's free slots), and no
    more."""
    claimer, started = claimer_for(tmp_path, media=4)
    claimer.step()
    for _ in range(4):
        enqueue("noop", {"seconds": 0})
        claimer.session.wakeup.notify("media")
    while claimer.step():
        pass
    assert len(started.tasks) == 4
    assert [t.more_runnable for _, t in started.tasks] == [False] * 4
    assert (claimer.claims, claimer.hints) == (6, 0)  # 2 first looks + 4 claims
    assert claimer.step() is False and claimer.claims == 6


def test_young_work_counts_as_a_backlog_only_after_a_notification_to_every_worker(tmp_path, enqueue):
    """Offered work is left to the slot it was offered to; work announced to everyone (the farm
    was full) is taken slot after slot, and the claim that sees the backlog end turns that off."""
    claimer, started = claimer_for(tmp_path, media=2)
    claimer.step()
    for _ in range(3):
        enqueue("noop", {"seconds": 0})
    claimer.session.wakeup.notify("media")  # an offer to this worker
    assert claimer.step() is True
    assert started.tasks[0][1].more_runnable is False  # the other two are younger than the grace
    assert claimer.step() is False
    claimer.session.wakeup.notify("media", everyone=True)
    assert claimer.step() is True
    assert started.tasks[1][1].more_runnable is True  # one more waits, of any age
    session = claimer.session
    lease = repository.Lease.of(started.tasks[0][1], session.uid, session.session_id)
    assert repository.finish(lease).accepted
    claimer.slots.put_back("media", started.tasks[0][0])
    claimer.session.wakeup.freed("media")
    assert claimer.step() is True  # the backlog: claimed at once, no hint
    assert started.tasks[2][1].more_runnable is False and claimer.hints == 0
    assert claimer._everyone["media"] is False
