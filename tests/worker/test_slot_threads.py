"""A slot keeps its thread from one stage to the next (the claimer hands a stage over and goes on,
without waiting for a new thread to be scheduled); a slot whose thread is stuck in a handler that
ignored its timeout gets a new thread, and the old one, when it returns, neither frees the slot
under the new stage nor takes more work."""

import threading
import uuid
from types import SimpleNamespace

from tests.worker.test_claimer import TIMING
from workers.session import Session
from workers.slots import Slots, StageRunner


class Recording(StageRunner):
    """The runtime's StageRunner with the stage itself replaced: records which thread ran each
    stage and, for stages in `hold`, waits until released."""

    def __init__(self, session, slots):
        super().__init__(session, slots, stop_renewing=lambda run: None)
        self.ran: list[tuple[int, threading.Thread]] = []
        self.hold: dict[int, threading.Event] = {}
        self.done = threading.Semaphore(0)

    def execute(self, slot, task, claimed_at):
        self.ran.append((task.id, threading.current_thread()))
        if task.id in self.hold:
            self.hold[task.id].wait(10)
        self.done.release()


def task(task_id: int):
    return SimpleNamespace(id=task_id, pool="media")


def runner_for(tmp_path, media=1):
    session = Session(f"threads-{uuid.uuid4().hex[:6]}", TIMING, {}, tmp_path)
    slots = Slots(media, 1)
    return Recording(session, slots), slots


def run_one(runner, slots, task_id):
    slot = slots.take("media")
    assert slot is not None
    runner.start(slot, task(task_id), 0.0)
    return slot


def test_a_slot_runs_its_stages_on_one_thread(tmp_path):
    runner, slots = runner_for(tmp_path)
    for task_id in (1, 2, 3):
        run_one(runner, slots, task_id)
        assert runner.done.acquire(timeout=5)
        for _ in range(100):  # the slot is put back right after the stage
            if slots.free("media"):
                break
            threading.Event().wait(0.01)
    threads = {thread for _, thread in runner.ran}
    assert [task_id for task_id, _ in runner.ran] == [1, 2, 3]
    assert len(threads) == 1 and threads.pop().is_alive()


def test_an_abandoned_slot_gets_a_new_thread_and_the_old_one_ends_without_freeing_it(tmp_path):
    runner, slots = runner_for(tmp_path)
    runner.hold = {1: threading.Event(), 2: threading.Event()}
    slot = run_one(runner, slots, 1)
    for _ in range(100):
        if runner.ran:
            break
        threading.Event().wait(0.01)
    slots.abandon(slot, "media")  # the supervisor gave up on the stuck handler
    assert run_one(runner, slots, 2) == slot
    assert runner.done.acquire(timeout=0.2) is False  # both held
    (_, old), (_, new) = runner.ran
    assert old is not new
    runner.hold[1].set()  # the stuck handler returns at last
    assert runner.done.acquire(timeout=5)
    old.join(5)
    assert not old.is_alive()  # it ended: the slot has another thread
    assert slots.free("media") == 0  # and the slot still belongs to stage 2
    runner.hold[2].set()
    assert runner.done.acquire(timeout=5)
    for _ in range(100):
        if slots.free("media"):
            break
        threading.Event().wait(0.01)
    assert slots.free("media") == 1 and new.is_alive()
