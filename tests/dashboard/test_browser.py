"""The dashboard in a real headless Chromium (Debian's, driven by playwright-python), against
pytest-django's live server and, where jobs must run, a real `manage.py runworker` process.

Without /usr/bin/chromium (or JETENCODE_CHROMIUM) or playwright these tests skip and say why;
with CI=true they fail instead, so CI cannot go green without them. Screenshots are written to
test-artifacts/dashboard/ (gitignored).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
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
    assert (
        page.input_value("#job-type") == "transcode"
    )  # the default; the scheduler's test job is one choice away
    page.select_option("#job-type", "noop")
    page.wait_for_url(re.compile(r"/dashboard/jobs/new\?type=noop$"))
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


# ---- polish a newcomer notices (each with a screenshot under test-artifacts/dashboard/) -----------

TRACEBACK = (
    "RuntimeError: ffmpeg exited with status 1: Invalid data found when processing input\n\n"
    "Traceback (most recent call last):\n"
    '  File "/srv/jetencode/workers/runtime.py", line 570, in _execute\n'
    "    result = handler(ctx)\n"
    "RuntimeError: ffmpeg exited with status 1: Invalid data found when processing input\n"
)


def unbroken(page, selector: str) -> list[str]:
    """The words of each element matching `selector` that a line break cuts in two."""
    return page.eval_on_selector_all(
        selector,
        """els => els.flatMap(el => [...el.childNodes].filter(n => n.nodeType === 3).filter(n => {
            const range = document.createRange(); range.selectNodeContents(n);
            return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size > 1;
        }).map(n => n.textContent))""",
    )


def test_a_failed_job_shows_one_line_with_the_traceback_folded(page, bob, enqueue, make_worker_row):
    from scheduler import repository
    from tests.kit.db import claim, lease_of

    worker = make_worker_row("w-polish")
    job = enqueue("transcode", {"input": "videos/x.mp4"}, max_attempts=1)
    dispatch = lease_of(claim(worker), worker)
    child = repository.Child("transcode.rendition", {"width": 640, "height": 360, "duration": 5.0})
    repository.finish(dispatch, children=[child])  # a dispatch that took a fraction of a second
    assert repository.fail(lease_of(claim(worker), worker), TRACEBACK, retryable=False).outcome == "failed"
    log_in(page, "bob")
    page.goto(f"/dashboard/jobs/{job}")
    summary = page.locator("[data-last-error] .error-summary")
    assert summary.inner_text() == (
        "transcode.rendition failed: ffmpeg exited with status 1: Invalid data found when processing input"
    )
    folded = page.locator("[data-last-error] details.traceback")
    assert folded.get_attribute("open") is None and not page.locator("[data-last-error] pre").is_visible()
    assert "Stage logs" in page.inner_text(".logs") and "last 0 lines" not in page.inner_text(".logs")
    durations = page.eval_on_selector_all(
        "tr[data-task-id] td:nth-child(7)", "tds => tds.map(t => t.innerText)"
    )
    assert re.fullmatch(r"\d\.\ds", durations[0]), durations  # the dispatch: tenths, not "0s"
    assert unbroken(page, ".timeline .stage-name") == []
    shot(page, "job-failed-summary")
    folded.locator("summary").click()
    assert "Traceback (most recent call last)" in page.locator("[data-last-error] pre").inner_text()
    shot(page, "job-failed-traceback-open")


def test_queue_messages_stay_clear_of_the_filters_and_stage_names_keep_their_words(
    page, bob, enqueue, make_worker_row
):
    from scheduler import repository
    from tests.kit.db import claim, lease_of

    worker = make_worker_row("w-stages")
    job = enqueue("highlight_generate", {"input": "videos/x.mp4"})
    children = [repository.Child("highlight_generate.analyze", {"duration": 5.0})]
    repository.finish(lease_of(claim(worker), worker), children=children)
    others = [enqueue("noop") for _ in range(3)]
    log_in(page, "bob")
    assert "highlight_generate.analyze" in row(page, job).inner_text().replace("\u200b", "")
    assert unbroken(page, ".queue-table .stage-name") == []  # stage and job type names alike
    for other in others:  # three messages at once
        row(page, other).locator('button[data-act="pause"]').click()
        page.wait_for_selector(f'tr[data-job-id="{other}"][data-state="paused"]')
    assert page.locator("#flash .msg").count() >= 2
    filters = page.locator("form.filters").bounding_box()
    for box in [
        page.locator("#flash .msg").nth(i).bounding_box() for i in range(page.locator("#flash .msg").count())
    ]:
        overlap_x = box["x"] < filters["x"] + filters["width"] and filters["x"] < box["x"] + box["width"]
        overlap_y = box["y"] < filters["y"] + filters["height"] and filters["y"] < box["y"] + box["height"]
        assert not (overlap_x and overlap_y), (box, filters)
    shot(page, "queue-messages")


def test_the_worker_page_says_missing_things_in_words(page, bob, make_worker_row):
    from scheduler.models import QueueWorker

    make_worker_row("w-bare")
    QueueWorker.objects.filter(uid="w-bare").update(
        capabilities={
            "ffmpeg": "7.0",
            "ffprobe": None,
            "gpus": [],
            "hardware_encoders": [],
            "encoders": ["libx264"],
        },
        system_sample={"cpu_percent": 12.5, "gpus": []},
    )
    log_in(page, "bob")
    page.goto("/dashboard/workers/w-bare")
    assert page.inner_text('dd[data-catalog="ffprobe"]') == "not found"
    assert page.inner_text('dd[data-catalog="gpus"]') == "none detected"
    assert page.inner_text('dd[data-catalog="hardware_encoders"]') == "none"
    text = page.inner_text("main")
    assert "None" not in text and "[]" not in text
    shot(page, "worker-bare")


def test_the_overview_records_a_sample_and_says_it_is_collecting(page, bob):
    from scheduler.models import QueueSample

    assert QueueSample.objects.count() == 0
    log_in(page, "bob")
    page.goto("/dashboard/")
    assert QueueSample.objects.count() == 1  # recorded when the page was first opened
    assert "Collecting samples" in page.inner_text("[data-collecting]")
    assert page.locator("svg.chart circle.dot").count() >= 1  # the one sample is drawn
    shot(page, "overview-collecting")
    QueueSample.objects.create(at=QueueSample.objects.get().at - timedelta(minutes=1), pending=2)
    page.goto("/dashboard/")
    assert page.locator("[data-collecting]").count() == 0
    assert page.locator("svg.chart path.line").count() >= 1
    shot(page, "overview-two-samples")


def test_the_admin_task_list_fits_1440_pixels(browser, live_server, alice, enqueue, make_worker_row):
    from scheduler import repository
    from tests.kit.db import claim, lease_of

    worker = make_worker_row("w-admin-wide-worker-name")
    enqueue("highlight_generate", {"input": "videos/a-long-input-name.mp4"}, priority=5)
    children = [repository.Child("highlight_generate.analyze", {"duration": 5.0})]
    repository.finish(lease_of(claim(worker), worker), children=children)
    repository.finish(lease_of(claim(worker), worker))  # the longest task type, started and finished
    for _ in range(2):
        enqueue("transcode", {"input": "videos/a-long-input-name.mp4"})
    claim(worker)
    context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=live_server.url)
    tab = context.new_page()
    tab.goto("/admin/login/?next=/admin/scheduler/queuetask/")
    tab.fill("input[name=username]", "alice")
    tab.fill("input[name=password]", PASSWORD)
    tab.click("input[type=submit]")
    tab.wait_for_url(re.compile(r"/admin/scheduler/queuetask/"))
    shot(tab, "admin-tasks-1440")
    # The results box scrolls sideways rather than widen the page: the last column must be in view.
    results = tab.locator("#changelist .results").bounding_box()
    last = tab.locator("#result_list thead th").last.bounding_box()
    assert last["x"] + last["width"] <= results["x"] + results["width"] + 1, (last, results)
    assert tab.evaluate("document.querySelector('#changelist .results').scrollWidth") <= results["width"] + 1
    assert tab.evaluate("document.documentElement.scrollWidth") <= 1440
    context.close()


def test_the_demo_clips_enter_the_library_with_thumbnails_and_distinct_titles(
    page, bob, start_worker, worker_env, settings
):
    from dashboard.views.library import _params
    from media import submission
    from media.demo import DEMO_CLIPS, seed_demo_clips
    from media.management.commands.seed_demo import library_assets, thumbnail_job
    from media.models import MediaAsset

    settings.MEDIA_ROOT_DIR = Path(worker_env["JETENCODE_MEDIA_ROOT"])
    settings.OUTPUT_ROOT_DIR = Path(worker_env["JETENCODE_OUTPUT_ROOT"])
    seed_demo_clips()
    assets = library_assets()
    assert sorted(a.path for a in assets) == sorted(DEMO_CLIPS)  # all six, inbox and public too
    for asset in assets:
        # What seed_demo queues is what the library's "Generate thumbnail" action creates.
        assert thumbnail_job(asset) == {
            "type": "thumbnail_generate",
            "params": _params("thumbnail_generate", asset, ""),
        }
        submission.create_job(None, thumbnail_job(asset))
    start_worker(f"library-{os.getpid()}", "--concurrency", "2")
    wait_for(
        lambda: not MediaAsset.objects.filter(thumbnail="").exists(),
        90,
        "every demo clip to get its thumbnail",
    )
    log_in(page, "bob")
    page.goto("/dashboard/library")
    page.wait_for_function(
        "n => [...document.querySelectorAll('td.thumb img')].filter(i => i.complete && i.naturalWidth > 0).length === n",
        arg=len(assets),
    )
    titles = page.eval_on_selector_all(
        "#library tbody td:nth-child(3) b, tbody td b", "bs => bs.map(b => b.innerText)"
    )
    demo_titles = [t for t in titles if t.startswith("Demo")]
    assert len(demo_titles) == len(assets) == len(set(demo_titles)), titles
    assert page.locator(".nothumb").count() == 0
    shot(page, "library-demo")


def test_an_hls_output_plays_from_its_download_url(page, bob, start_worker, worker_env, settings):
    """Chromium's own HLS player, pointed at the API's download_url of the master playlist: the
    renditions' playlists and segments it asks for resolve under /v2/jobs/{id}/outputs/."""
    from media import submission
    from media.demo import seed_demo_clips

    settings.MEDIA_ROOT_DIR = Path(worker_env["JETENCODE_MEDIA_ROOT"])
    settings.OUTPUT_ROOT_DIR = Path(worker_env["JETENCODE_OUTPUT_ROOT"])
    seed_demo_clips()
    params = {"input": "videos/demo-landscape.mp4", "ladder": [{"height": 240}, {"height": 180}]}
    job = submission.create_job(None, {"type": "transcode", "params": params}).id
    start_worker(f"hls-{os.getpid()}", "--concurrency", "2")
    wait_for_status(job, "completed", seconds=180)
    log_in(page, "bob")
    master = page.evaluate(
        "async id => (await (await fetch('/v2/jobs/' + id)).json()).outputs"
        ".find(o => o.name === 'hls/master.m3u8').download_url",
        str(job),
    )
    assert master.endswith(f"/v2/jobs/{job}/outputs/hls/master.m3u8")
    fetched = []
    page.on("response", lambda r: fetched.append((r.url, r.status)) if "/outputs/" in r.url else None)
    page.evaluate(
        """src => { const v = document.createElement('video'); v.id = 'hls'; v.muted = true; v.controls = true;
                   v.src = src; document.querySelector('main').prepend(v); v.play(); }""",
        master,
    )
    page.wait_for_function(
        "() => { const v = document.getElementById('hls'); return v.currentTime > 1 && v.videoWidth > 0; }",
        timeout=60_000,
    )
    assert page.evaluate("document.getElementById('hls').error") is None
    urls = [url for url, status in fetched if status in (200, 206)]
    assert any(u.endswith("/outputs/hls/master.m3u8") for u in urls), fetched
    assert any(re.search(r"/outputs/hls/\d+p/index\.m3u8$", u) for u in urls), fetched
    assert any(re.search(r"/outputs/hls/\d+p/seg_\d+\.ts$", u) for u in urls), fetched
    shot(page, "hls-playing")
