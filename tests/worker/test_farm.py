"""A worker process costs PostgreSQL a constant (issue 15): at most three connections whatever its
slot count, and no herd — one enqueued job costs about one claim however many workers idle."""

import re
import time

import pytest

from tests.kit.db import one, sql
from tests.kit.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

CLAIMS = re.compile(r"offline \(exit 0\): (\d+) claim\(s\), (\d+) cheap read\(s\)")


def connections_of(uid: str) -> list[str]:
    return [
        name
        for (name,) in sql(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name LIKE %s",
            [f"jetencode-worker {uid} %"],
        )
    ]


def completed(jobs) -> bool:
    return one(
        "SELECT count(*) FROM jobs WHERE id = ANY(%s::uuid[]) AND status = 'completed'", [jobs]
    ) == len(jobs)


def test_a_worker_holds_at_most_three_connections_whatever_its_slot_count(start_worker, enqueue):
    four = start_worker("conns-4", "--concurrency", "4")
    eight = start_worker("conns-8", "--concurrency", "8")
    # Every slot busy, progress written, stages finishing: the busiest a worker gets.
    jobs = [enqueue("noop", {"seconds": 1.5}) for _ in range(24)]
    most = {"conns-4": 0, "conns-8": 0}
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while not completed(jobs) and time.monotonic() < deadline:
        for uid in most:
            names = connections_of(uid)
            seen.update(names)
            most[uid] = max(most[uid], len(names))
        time.sleep(0.05)
    assert completed(jobs), "the jobs did not complete"
    running_together = one(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM queue_tasks t1 JOIN queue_tasks t2 "
        "ON t2.claimed_by = t1.claimed_by AND t2.started_at <= t1.started_at AND t2.finished_at > t1.started_at "
        "WHERE t1.claimed_by = 'conns-8' GROUP BY t1.id) x"
    )
    print(
        f"\nconnections at most: {most}; names seen: {sorted(seen)}; conns-8 ran {running_together} at once"
    )
    assert running_together >= 6  # the 8-slot worker really ran most of its slots at once
    assert most["conns-4"] <= 3 and most["conns-8"] <= 3, (most, sorted(seen))
    roles = {name.rsplit(" ", 1)[1] for name in seen}
    assert roles == {"work", "heartbeat", "listen"}, seen
    assert four.drain() == 0 and eight.drain() == 0


def test_idle_workers_make_about_one_claim_per_enqueued_job(start_worker, enqueue):
    uids = [f"herd-{i}" for i in range(4)]
    workers = [start_worker(uid, "--concurrency", "4") for uid in uids]
    time.sleep(1.5)  # every claimer idle, its first claims made
    before = one(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    )
    started = time.monotonic()
    jobs = []
    for _ in range(20):
        jobs.append(enqueue("noop", {"seconds": 0}))
        time.sleep(0.15)
    wait_for(lambda: completed(jobs), 30, "the jobs to complete", workers=workers)
    seconds = time.monotonic() - started
    after = one("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
    for worker in workers:
        assert worker.drain() == 0
    counts = [CLAIMS.search(worker.output()) for worker in workers]
    assert all(counts), [w.output()[-2000:] for w in workers]
    claims = sum(int(m.group(1)) for m in counts)
    hints = sum(int(m.group(2)) for m in counts)
    # Each worker's first look (media and background) is a claim without a notification.
    startup = 2 * len(workers)
    per_job = (claims - startup) / len(jobs)
    print(
        f"\n{len(workers)} idle 4-slot workers, {len(jobs)} jobs in {seconds:.1f}s: {claims} claims "
        f"({per_job:.2f} per job after the first looks), {hints} cheap reads, "
        f"{after - before} transactions in the database (this test's own included)"
    )
    assert per_job <= 2.0, (claims, hints)
    assert len({one("SELECT claimed_by FROM queue_tasks WHERE job_id = %s", [j]) for j in jobs}) >= 2
