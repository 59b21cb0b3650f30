"""The job page's quality table and bitrate-vs-VMAF chart in a real headless Chromium, for a transcode
that really ran (real FFmpeg, a worker in this process) and was measured with libvmaf."""

from __future__ import annotations

import json
import subprocess

import pytest

from media import commands
from media.ffmpeg import ffmpeg_path
from tests.dashboard.test_browser import browser, log_in, page, shot  # noqa: F401 (fixtures)
from tests.kit.db import job_status
from tests.kit.media import MediaRoots
from tests.kit.workers import InProcessWorker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture
def measured_job(tmp_path, settings):
    """A two-rung transcode measured with VMAF, PSNR and SSIM: (job id, its quality.json)."""
    roots = MediaRoots.under(tmp_path)
    settings.MEDIA_ROOT_DIR, settings.OUTPUT_ROOT_DIR = roots.media, roots.outputs
    settings.WORKSPACE_ROOT_DIR, settings.S3_BUCKET = roots.workspace, ""
    clip = roots.media / "clip.mp4"
    subprocess.run(commands.synthetic_clip(clip, seconds=2, ffmpeg=ffmpeg_path()), check=True, timeout=60)
    worker = InProcessWorker("quality-browser", workspace_root=roots.workspace)
    params = {
        "input": "clip.mp4",
        "ladder": [{"height": 180}, {"height": 144, "video_bitrate_kbps": 120}],
        "quality_metrics": ["vmaf", "psnr", "ssim"],
        "preset": "ultrafast",
        "segment_seconds": 1,
    }
    run = worker.run_job("transcode", params)
    assert job_status(run.job_id) == "completed"
    return run.job_id, json.loads((run.output_dir / "quality.json").read_text())


def test_the_job_page_shows_each_renditions_measured_quality(page, bob, measured_job):  # noqa: F811
    job_id, document = measured_job
    log_in(page, "bob")
    page.goto(f"/dashboard/jobs/{job_id}")
    table = page.locator("[data-quality-table]")
    table.wait_for()
    assert table.locator("tbody tr").count() == 2
    for entry in document["renditions"]:
        cells = table.locator(f'tr[data-rendition="{entry["name"]}"]')
        # Shown rounded (Django's floatformat rounds half up, Python's format to even: compare numbers).
        for column, key, places in (
            ("vmaf", "vmaf", 2),
            ("vmaf_p5", "vmaf_p5", 2),
            ("psnr", "psnr_db", 2),
            ("ssim", "ssim", 4),
            ("bitrate", "bitrate_kbps", 1),
        ):
            shown = cells.locator(f'[data-col="{column}"]').inner_text()
            assert len(shown.split(".")[1]) == places
            assert float(shown) == pytest.approx(entry[key], abs=0.51 * 10**-places)
        assert "libx264" in cells.inner_text()
    chart = page.locator("svg.quality-chart")
    assert chart.locator("circle[data-rendition]").count() == 2
    assert chart.locator('circle[data-rendition="144p"] title').text_content().startswith("144p: VMAF")
    assert "vmaf_v0.6.1" in page.locator("#quality h2").inner_text()
    shot(page, "job-quality")
