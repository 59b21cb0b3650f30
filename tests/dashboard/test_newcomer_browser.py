"""The pages a newcomer meets first (issue 35), in a real headless Chromium against the live server
and, where jobs must run, a real worker: the overview of a fresh install, the new-job form, a failed
job's page, a finished transcode's and re-encode's pages, the job list's input column and actions.

The fixtures and helpers are test_browser.py's (same Chromium, same skip/CI rule).
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from scheduler.models import Job, QueueSample
from tests.dashboard import test_browser as browser_tests
from tests.dashboard.test_browser import log_in, shot, wait_for_status
from tests.kit.waiting import wait_for

# test_browser.py's fixtures, under their own names so pytest finds them here too.
browser, page, worker = browser_tests.browser, browser_tests.page, browser_tests.worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

LOG_LINE_PX = 17  # .log's line-height in dashboard.css


def right_edges(page, selector: str) -> list[float]:
    return page.eval_on_selector_all(
        selector, "els => els.map(e => Math.round(e.getBoundingClientRect().right))"
    )


def test_the_overview_of_a_fresh_install_fits_its_data_and_counts_whole_jobs(page, bob):
    # Three minutes of samples (a fresh install), pending 3 then 4 then 3 jobs.
    now = timezone.now().replace(second=0, microsecond=0)
    for minutes, pending in ((3, 3), (2, 4), (1, 3)):
        QueueSample.objects.create(
            at=now - timedelta(minutes=minutes), pending=pending, running=1, completed=2
        )
    log_in(page, "bob")
    page.goto("/dashboard/")
    # The default window is fitted to the samples (5 minutes here), not 6 hours with a sliver of data.
    assert page.inner_text('nav.seg [aria-current="true"]') == "fit · 5 min"
    path = page.get_attribute("svg.chart path.line.s-pending", "d")
    xs = [float(x) for x in re.findall(r"[ML]([\d.]+) ", path)]
    width = float(page.get_attribute("svg.chart", "viewBox").split()[2])
    assert len(xs) == 3 and xs[-1] - xs[0] > 0.3 * width, path  # the samples span the chart

    # Gridline labels are whole jobs, in the fitted window and in every fixed one (5-minute buckets
    # take the busiest sample of the bucket, never a mean such as 3.3).
    for query in ("", "?hours=6", "?hours=48"):
        page.goto(f"/dashboard/{query}")
        labels = page.eval_on_selector_all("svg.chart text.ylab", "ts => ts.map(t => t.textContent)")
        assert labels and all(re.fullmatch(r"\d+", label) for label in labels), (query, labels)
        titles = page.eval_on_selector_all("svg.chart title", "ts => ts.map(t => t.textContent)")
        assert not any(re.search(r"\d\.\d", t) for t in titles if t.startswith("pending")), titles

    # The two rows of tiles end where the charts end.
    page.goto("/dashboard/")
    edges = right_edges(page, "section.tiles") + right_edges(page, ".charts")
    assert max(edges) - min(edges) <= 1, edges
    tile_edges = right_edges(page, "section.tiles > :last-child") + right_edges(page, ".charts > :last-child")
    assert max(tile_edges) - min(tile_edges) <= 1, tile_edges
    shot(page, "overview-fresh")


def test_the_overview_with_no_samples_yet_fits_the_first_one(page, bob):
    log_in(page, "bob")
    page.goto("/dashboard/")
    assert page.inner_text('nav.seg [aria-current="true"]') == "fit · 5 min"
    assert QueueSample.objects.count() == 1  # recorded as the page was asked for
    page.wait_for_selector("[data-collecting]")


@pytest.fixture
def demo_library(start_worker, worker_env, settings):
    """The demo clips in the library with their thumbnails (what ./scripts/run seeds), and a worker."""
    from media import submission
    from media.demo import seed_demo_clips
    from media.management.commands.seed_demo import library_assets, thumbnail_job, validate_job
    from media.models import MediaAsset

    settings.MEDIA_ROOT_DIR = Path(worker_env["JETENCODE_MEDIA_ROOT"])
    settings.OUTPUT_ROOT_DIR = Path(worker_env["JETENCODE_OUTPUT_ROOT"])
    seed_demo_clips()
    assets = library_assets()
    for asset in assets:
        submission.create_job(None, validate_job(asset))
        submission.create_job(None, thumbnail_job(asset))
    start_worker(f"newcomer-{os.getpid()}", "--concurrency", "2")
    wait_for(
        lambda: (
            not MediaAsset.objects.filter(thumbnail="").exists()
            and not MediaAsset.objects.filter(duration_seconds__isnull=True).exists()
        ),
        120,
        "the demo clips validated, with thumbnails",
    )
    return list(MediaAsset.objects.order_by("path"))


def test_the_new_job_form_picks_a_library_video_and_edits_the_ladder(page, bob, demo_library):
    log_in(page, "bob")
    page.goto("/dashboard/jobs/new")
    assert page.input_value("#job-type") == "transcode"  # the type comes first, transcode by default
    labels = page.eval_on_selector_all(".field > label", "ls => ls.map(l => l.innerText.trim())")
    assert {"CRF", "Minimum VMAF", "Target VMAF", "Library video", "Input path"} <= set(labels), labels
    assert not {"Crf", "Min Vmaf"} & set(labels), labels

    # The input picker: every library video, with its thumbnail loaded and its duration.
    picks = page.locator("[data-picker] label.pick:not(.pick-none)")
    assert picks.count() == len(demo_library) == 6
    page.wait_for_function(
        "n => [...document.querySelectorAll('[data-picker] img')].filter(i => i.complete && i.naturalWidth > 0).length === n",
        arg=len(demo_library),
    )
    portrait = next(a for a in demo_library if a.path == "videos/demo-portrait.mp4")
    card = page.locator(f'[data-picker] label.pick:has(input[value="{portrait.id}"])')
    assert "4s" in card.inner_text() and "360×640" in card.inner_text()
    page.fill("#f-input", "videos/typed.mp4")
    card.click()
    assert page.input_value("#f-input") == ""  # a picked video replaces a typed path

    # The ladder editor: a preset, then one rung's codec changed; the JSON it posts follows.
    assert page.is_hidden("#f-ladder")
    page.click('button[data-preset="Mobile 480/360/240"]')
    assert page.locator("tr[data-rung]").count() == 3
    page.select_option('tr[data-rung="1"] select', "hevc")
    page.click("button[data-add-rung]")
    page.fill('tr[data-rung="3"] input[aria-label$="height"]', "100")  # below the minimum of 144
    page.fill("#f-crf", "60")
    shot(page, "job-new-form")

    # The 422: each message beside its own field, what was entered kept.
    page.click("#create-job")
    page.wait_for_selector(".field.has-error")
    assert "less than or equal to 51" in page.inner_text('[data-field="crf"] .field-error')
    assert page.inner_text('[data-field="ladder"] .field-error') == (
        "rung 4 height: Input should be greater than or equal to 144"
    )
    assert page.input_value("#f-crf") == "60"
    assert page.locator("tr[data-rung]").count() == 4
    assert page.is_checked(f'[data-picker] input[value="{portrait.id}"]')
    assert not Job.objects.filter(type="transcode").exists()
    # Chromium reports the 422 document as a failed load on the console: expected here, and only it.
    assert page.js_errors == [
        "Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)"
    ]
    page.js_errors.clear()
    shot(page, "job-new-422")

    page.click('tr[data-rung="3"] button:has-text("Remove")')
    page.fill("#f-crf", "26")
    page.click("#create-job")
    page.wait_for_url(re.compile(r"/dashboard/jobs/[0-9a-f-]{36}$"))
    job = Job.objects.get(type="transcode")
    assert job.params["video_id"] == str(portrait.id) and job.params["crf"] == 26
    assert job.params["ladder"] == [{"height": 480}, {"height": 360, "codec": "hevc"}, {"height": 240}]


def test_a_failed_job_page_shows_the_failure_in_its_stage_logs(page, bob, enqueue, worker):
    job = enqueue("noop", {"fail_attempts": 1}, max_attempts=1)
    wait_for_status(job, "failed")
    log_in(page, "bob")
    page.goto(f"/dashboard/jobs/{job}")
    page.wait_for_selector('[data-job-status="failed"]')
    panes = page.locator("pre[data-log]")
    stage_log = panes.nth(1).inner_text()
    assert "no stage output" not in stage_log
    failure = page.inner_text("[data-stage-failure]")
    assert re.fullmatch(
        r"\[noop #\d+\] failed \(attempt 1/1\): noop: attempt 1 fails on purpose \(fail_attempts=1\)", failure
    ), failure
    shot(page, "job-failed")


def log_panes_start_on_whole_lines(page) -> None:
    """Each log pane, scrolled to its end as the page leaves it, starts on a whole line."""
    geometry = page.eval_on_selector_all(
        "pre[data-log]",
        "ps => ps.map(p => [p.scrollTop, p.clientHeight, p.scrollHeight, parseFloat(getComputedStyle(p).lineHeight)])",
    )
    for scroll_top, client_height, scroll_height, line_height in geometry:
        assert line_height == LOG_LINE_PX, geometry
        assert client_height % LOG_LINE_PX == 0 and scroll_top % LOG_LINE_PX == 0, geometry
        if scroll_height > client_height:
            assert scroll_top + client_height == scroll_height, geometry  # pinned to the end


def boxes_do_not_overlap(page, selector: str) -> None:
    boxes = page.eval_on_selector_all(
        selector,
        "ts => ts.map(t => { const r = t.getBoundingClientRect(); return [t.textContent, r.left, r.top, r.right, r.bottom]; })",
    )
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]
            assert apart, f"{a[0]!r} and {b[0]!r} overlap: {boxes}"


def test_finished_media_jobs_read_right_on_their_pages_and_in_the_list(page, bob, demo_library):
    from media import submission
    from media.models import MediaAsset

    landscape = "videos/demo-landscape.mp4"
    ladder = [{"height": 360}, {"height": 270}, {"height": 240}]
    transcode = submission.create_job(
        None, {"type": "transcode", "params": {"input": landscape, "ladder": ladder}}
    )
    reencode = submission.create_job(None, {"type": "reencode_streaming", "params": {"input": landscape}})
    for job in (transcode, reencode):
        wait_for_status(job.id, "completed", seconds=180)
    log_in(page, "bob")

    page.goto(f"/dashboard/jobs/{transcode.id}")
    page.wait_for_selector("svg.quality-chart")
    players = page.eval_on_selector_all(
        ".output video, .output img", "ms => ms.map(m => [m.clientWidth, m.clientHeight])"
    )
    assert len(players) == 4 and len(set(map(tuple, players))) == 1, players  # 3 renditions + thumbnail
    boxes_do_not_overlap(page, "svg.quality-chart text")
    log_panes_start_on_whole_lines(page)
    shot(page, "job-transcode")

    page.goto(f"/dashboard/jobs/{reencode.id}")
    page.wait_for_selector("[data-quality-table]")
    assert page.inner_text("[data-quality-table] tbody td:nth-child(5)") == "23"  # params' CRF
    asset = MediaAsset.objects.get(source_job_id=reencode.id)
    assert asset.thumbnail == f"{reencode.id}/thumbnail.jpg"
    page.goto("/dashboard/library")
    image = page.locator(f'tr:has-text("{asset.path}") td.thumb img')
    page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=image.element_handle())

    # The job list: what each job works on, and Re-run / Outputs on finished jobs.
    page.goto("/dashboard/jobs")
    row = page.locator(f'tr[data-job-id="{reencode.id}"]')
    assert row.locator("td.job-input").inner_text() == landscape
    thumbnail_row = page.locator("tr[data-job-id]:has-text('thumbnail_generate')").first
    assert thumbnail_row.locator("td.job-input").inner_text().startswith("Demo · ")
    assert row.locator("a[data-outputs]").inner_text() == "Outputs (3)"  # video, quality.json, thumbnail
    shot(page, "jobs-actions")
    row.locator("a[data-rerun]").click()
    page.wait_for_url(re.compile(r"/dashboard/jobs/new\?from="))
    assert page.input_value("#job-type") == "reencode_streaming"
    assert page.input_value("#f-input") == landscape
    page.click("#create-job")
    page.wait_for_url(re.compile(r"/dashboard/jobs/[0-9a-f-]{36}$"))
    rerun = Job.objects.filter(type="reencode_streaming").order_by("-created_at").first()
    assert rerun.id != reencode.id and rerun.params == reencode.params
