"""The dashboard in a real headless Chromium (Debian's, driven by playwright-python), against
pytest-django's live server and, where jobs must run, a real `manage.py runworker` process.

Without /usr/bin/chromium (or JETENCODE_CHROMIUM) or playwright these tests skip and say why;
with CI=true they fail instead, so CI cannot go green without them. Screenshots are written to
test-artifacts/dashboard/ (gitignored).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from scheduler.models import Job
from tests.kit import ROOT
from tests.kit.db import job_status
from tests.kit.personas import PASSWORD
from tests.kit.waiting import wait_for

ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
CHROMIUM = os.environ.get("JETENCODE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
WAIT_MS = 20_000

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _unavailable() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set JETENCODE_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _unavailable()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests are mandatory on CI: {reason}")
        pytest.skip(f"browser tests skipped: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1360, "height": 860}, base_url=live_server.url)
    context.set_default_timeout(WAIT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    tab.on("dialog", lambda dialog: dialog.accept())  # "Cancel this job?" and friends
    tab.js_errors = errors
    yield tab
    context.close()
    assert errors == [], f"JavaScript errors: {errors}"


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def log_in(page, username: str) -> None:
    page.goto("/dashboard/queue")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/dashboard/queue$"))


def queue_order(page) -> list[str]:
    return page.eval_on_selector_all(
        'section[data-group="pending"] tr[data-job-id]', "rows => rows.map(r => r.dataset.jobId)"
    )


def wait_for_status(job_id, status: str, seconds: float = 20) -> None:
    wait_for(lambda: job_status(job_id) == status, seconds, f"job {job_id} to become {status}", interval=0.1)


def row(page, job_id):
    return page.locator(f'tr[data-job-id="{job_id}"]')


@pytest.fixture
def worker(start_worker):
    """A real worker process against the live server's database (killed before the flush): its uid."""
    worker = start_worker(
        f"browser-{os.getpid()}",
        "--concurrency",
        "2",
        # A cancellation reaches the stage within two heartbeats: keep them short.
        env={"JETENCODE_HEARTBEAT_SECONDS": "0.5", "JETENCODE_SHUTDOWN_GRACE_SECONDS": "2"},
    )
    return worker.uid


def test_log_in_create_a_noop_job_and_watch_it_complete(page, bob, worker):
    log_in(page, "bob")
    page.click("text=Jobs")
    page.click("text=New job")
    page.wait_for_url(re.compile(r"/dashboard/jobs/new"))
    assert page.input_value("#job-type") == "noop"
    page.fill('input[name="p.seconds"]', "1.5")
    page.fill('input[name="priority"]', "3")
    shot(page, "job-new")
    page.click("#create-job")
    page.wait_for_url(re.compile(r"/dashboard/jobs/[0-9a-f-]{36}"))
    job = Job.objects.get()
    assert job.params["seconds"] == 1.5

    # The page refreshes itself: the bar moves while the stage runs, then reads 100% and completed.
    page.wait_for_selector('[data-job-status="running"], [data-job-status="completed"]')
    page.wait_for_selector('[data-job-status="completed"]')
    assert page.get_attribute('[data-job-progress] [role="progressbar"]', "aria-valuenow") == "100"
    page.wait_for_selector("tr[data-task-id] .badge.b-completed")
    shot(page, "job-completed")

    page.click("text=Jobs")
    page.wait_for_selector(f'tr[data-job-id="{job.id}"][data-status="completed"]')
    shot(page, "jobs")


def test_an_operator_reorders_two_queued_jobs(page, bob, enqueue):
    first, second = enqueue("noop"), enqueue("noop")
    log_in(page, "bob")
    assert queue_order(page) == [str(first), str(second)]

    row(page, first).locator('button[data-act="down"]').click()
    page.wait_for_function(
        "ids => [...document.querySelectorAll('section[data-group=\"pending\"] tr[data-job-id]')]"
        ".map(r => r.dataset.jobId).join() === ids",
        arg=f"{second},{first}",
    )
    assert "Moved noop" in page.inner_text("#flash")
    shot(page, "queue-reordered")

    row(page, first).locator('button[data-act="run-next"]').click()
    page.wait_for_function(
        "ids => [...document.querySelectorAll('section[data-group=\"pending\"] tr[data-job-id]')]"
        ".map(r => r.dataset.jobId).join() === ids",
        arg=f"{first},{second}",
    )

    row(page, second).locator('input[name="priority"]').fill("9")
    row(page, second).locator('button[data-act="priority"]').click()
    page.wait_for_function(
        "ids => [...document.querySelectorAll('section[data-group=\"pending\"] tr[data-job-id]')]"
        ".map(r => r.dataset.jobId).join() === ids",
        arg=f"{second},{first}",
    )
    assert row(page, second).locator("[data-priority]").inner_text() == "9"


def test_an_operator_pauses_and_resumes_a_job(page, bob, enqueue):
    job = enqueue("noop")
    log_in(page, "bob")
    row(page, job).locator('button[data-act="pause"]').click()
    page.wait_for_selector(f'tr[data-job-id="{job}"][data-state="paused"]')
    assert "paused by an operator" in row(page, job).inner_text()
    shot(page, "queue-paused")

    row(page, job).locator('button[data-act="resume"]').click()
    page.wait_for_selector(f'tr[data-job-id="{job}"][data-state="pending"]')
    assert row(page, job).locator('button[data-act="pause"]').count() == 1


def test_an_operator_cancels_a_running_job(page, bob, enqueue, worker):
    job = enqueue("noop", {"seconds": 120})
    wait_for_status(job, "running")
    log_in(page, "bob")
    page.wait_for_selector(f'section[data-group="{worker}"] tr[data-job-id="{job}"][data-state="running"]')
    shot(page, "queue-running")
    row(page, job).locator('button[data-act="cancel"]').click()
    page.wait_for_selector("#flash >> text=Cancel requested")
    # The worker's heartbeat sees the request and stops the stage within two heartbeats.
    page.goto(f"/dashboard/jobs/{job}")
    page.wait_for_selector('[data-job-status="cancelled"]')
    assert page.locator("tr[data-task-id] .badge.b-cancelled").count() == 1
    shot(page, "job-cancelled")


def test_a_viewer_sees_no_controls(page, charlie, enqueue, make_worker_row):
    make_worker_row("w-viewer")
    job = enqueue("noop")
    log_in(page, "charlie")
    assert row(page, job).count() == 1
    assert page.locator("form[data-action]").count() == 0
    assert page.locator('[data-role="viewer"]').count() == 1
    shot(page, "queue-viewer")
    for path in (
        "/dashboard/",
        "/dashboard/jobs",
        f"/dashboard/jobs/{job}",
        "/dashboard/library",
        "/dashboard/workers",
        "/dashboard/workers/w-viewer",
    ):
        page.goto(path)
        assert page.locator("form[data-action], #job-form, #library-form").count() == 0, path
        assert page.locator("text=New job").count() == 0, path
    # Posting anyway is refused by the server.
    status = page.evaluate(
        """async (url) => {
            const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
            const r = await fetch(url, {method: "POST", headers: {"X-CSRFToken": token, "Accept": "application/json"}});
            return r.status;
        }""",
        f"/dashboard/jobs/{job}/actions/cancel",
    )
    assert status == 403
    page.js_errors.remove("Failed to load resource: the server responded with a status of 403 (Forbidden)")
    assert Job.objects.get(pk=job).status == "pending"
