"""Dedicated execution in a real headless Chromium (tests/dashboard/test_browser.py's harness): an
operator sends a job to a dedicated worker from the queue page, shares it again from the job page,
dedicates it once more, and watches a real `runworker --reservation` process run it and leave."""

from __future__ import annotations

import pytest

from scheduler.models import QueueReservation
from tests.dashboard.test_browser import browser, log_in, page, row, shot, wait_for_status  # noqa: F401
from tests.kit.db import claim

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(150)]


def test_an_operator_runs_a_job_on_a_dedicated_worker(page, bob, enqueue, make_worker_row, start_worker):  # noqa: F811
    shared = make_worker_row("w-shared")
    job = enqueue("noop")
    log_in(page, "bob")
    row(page, job).locator('button[data-act="dedicate"]').click()
    page.wait_for_selector(f'tr[data-job-id="{job}"] button[data-act="share"]')
    reservation = QueueReservation.objects.get(job_id=job)
    assert (
        f"waiting for a dedicated worker (reservation {str(reservation.id)[:8]}…"
        in row(page, job).inner_text()
    )
    assert "waits for a dedicated worker" in page.inner_text("#flash")
    assert claim(shared) is None  # the shared worker cannot take it
    shot(page, "queue-dedicated")

    page.goto(f"/dashboard/jobs/{job}")
    page.wait_for_selector('[data-reservation="requested"]')
    page.locator('button[data-act="share"]').click()
    page.wait_for_selector('[data-reservation="released"]')
    page.locator('button[data-act="dedicate"]').click()
    page.wait_for_selector('[data-reservation="requested"]')
    again = QueueReservation.objects.filter(job_id=job).order_by("-created_at").first()
    assert again.id != reservation.id and again.state == "requested"

    worker = start_worker("dedicated-browser", "--reservation", str(again.id))
    wait_for_status(job, "completed", 60)
    assert worker.wait(30) == 0
    page.wait_for_selector('[data-job-status="completed"]')
    page.reload()
    page.wait_for_selector('[data-reservation="released"]')
    assert "dedicated-browser" in page.inner_text('[data-reservation="released"]')
    shot(page, "job-dedicated-done")
