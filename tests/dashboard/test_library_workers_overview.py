"""/dashboard/library, /dashboard/workers[/<uid>] and the overview with its SVG charts."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard import charts
from media.models import MediaAsset
from scheduler import repository
from scheduler.models import Job, QueueSample
from tests.kit.db import claim

LIBRARY = "/dashboard/library"


@pytest.fixture
def assets(db):
    return [
        MediaAsset.objects.create(
            path="videos/beach.mp4",
            title="Beach",
            directory="videos",
            duration_seconds=12.5,
            width=1920,
            height=1080,
            fps=30,
            video_codec="h264",
            audio_codec="aac",
            orientation="landscape",
            valid=True,
            size_bytes=5_000_000,
            tags=["1080p", "landscape"],
        ),
        MediaAsset.objects.create(
            path="inbox/broken.mp4",
            title="Broken",
            directory="inbox",
            valid=False,
            invalid_reason="moov atom not found",
        ),
        MediaAsset.objects.create(path="inbox/new.mov", directory="inbox", orientation="portrait"),
    ]


def asset_ids(html):
    return re.findall(r'<tr data-asset-id="([0-9a-f-]+)"', html)


# --- library --------------------------------------------------------------------------------------


def test_the_library_lists_metadata_and_validity(viewer_client, assets):
    html = viewer_client.get(LIBRARY).content.decode()
    assert set(asset_ids(html)) == {str(a.id) for a in assets}
    assert "1920×1080" in html and "12s" in html
    assert "moov atom not found" in html
    assert 'class="badge b-completed">valid' in html and 'class="badge b-failed">invalid' in html
    assert "unchecked" in html
    assert 'name="asset"' not in html  # the viewer gets no checkboxes


def test_the_library_searches_and_filters_assets(viewer_client, assets):
    beach, broken, new = assets
    assert asset_ids(viewer_client.get(LIBRARY + "?q=beach").content.decode()) == [str(beach.id)]
    assert set(asset_ids(viewer_client.get(LIBRARY + "?directory=inbox").content.decode())) == {
        str(broken.id),
        str(new.id),
    }
    assert asset_ids(viewer_client.get(LIBRARY + "?validity=invalid").content.decode()) == [str(broken.id)]
    assert asset_ids(viewer_client.get(LIBRARY + "?validity=unchecked").content.decode()) == [str(new.id)]
    assert asset_ids(viewer_client.get(LIBRARY + "?orientation=portrait").content.decode()) == [str(new.id)]


def test_a_per_asset_action_creates_one_job_and_opens_it(operator_client, assets):
    beach = assets[0]
    response = operator_client.post(
        reverse("dashboard:library_action"), {"one": f"thumbnail_generate:{beach.id}"}
    )
    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:job", args=[job.id])
    assert (job.type, job.params["video_id"]) == ("thumbnail_generate", str(beach.id))


def test_a_bulk_action_creates_a_job_per_asset_and_lists_them(operator_client, assets):
    response = operator_client.post(
        reverse("dashboard:library_action"),
        {
            "action": "move_to_library",
            "asset": [str(a.id) for a in assets[1:]],
            "target_directory": "videos/sorted",
        },
    )
    jobs = list(Job.objects.all())
    assert len(jobs) == 2
    assert {j.params["target_directory"] for j in jobs} == {"videos/sorted"}
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(reverse("dashboard:jobs") + "?ids=")
    assert all(str(j.id) in location for j in jobs)


@pytest.mark.parametrize(
    "action",
    ["transcode", "reencode_streaming", "thumbnail_generate", "validate", "move_to_library", "scene_extract"],
)
def test_every_library_action_creates_its_job_type(operator_client, assets, action):
    operator_client.post(reverse("dashboard:library_action"), {"one": f"{action}:{assets[0].id}"})
    assert Job.objects.get().type == action


def test_library_actions_report_refusals(operator_client, assets):
    response = operator_client.post(
        reverse("dashboard:library_action"),
        {"action": "move_to_library", "asset": [str(assets[0].id)], "target_directory": "../escape"},
        follow=True,
    )
    assert Job.objects.count() == 0
    assert "not created for videos/beach.mp4" in response.content.decode()
    response = operator_client.post(reverse("dashboard:library_action"), {"action": "validate"}, follow=True)
    assert "Select at least one asset" in response.content.decode()
    response = operator_client.post(
        reverse("dashboard:library_action"), {"action": "explode", "asset": [str(assets[0].id)]}, follow=True
    )
    assert "Choose an action" in response.content.decode()


def test_thumbnails_are_served_from_the_output_root_only(viewer_client, assets, settings, tmp_path, enqueue):
    settings.OUTPUT_ROOT_DIR = tmp_path
    job = enqueue("noop")
    (tmp_path / str(job)).mkdir()
    (tmp_path / str(job) / "thumbnail.jpg").write_bytes(b"\xff\xd8\xff")
    beach, broken, new = assets
    MediaAsset.objects.filter(pk=beach.pk).update(thumbnail=f"{job}/thumbnail.jpg")
    MediaAsset.objects.filter(pk=broken.pk).update(thumbnail="../../etc/passwd")
    html = viewer_client.get(LIBRARY).content.decode()
    assert reverse("dashboard:asset_thumbnail", args=[beach.id]) in html
    response = viewer_client.get(reverse("dashboard:asset_thumbnail", args=[beach.id]))
    assert response.status_code == 200 and response["Content-Type"] == "image/jpeg"
    assert viewer_client.get(reverse("dashboard:asset_thumbnail", args=[broken.id])).status_code == 404
    assert viewer_client.get(reverse("dashboard:asset_thumbnail", args=[new.id])).status_code == 404


# --- workers --------------------------------------------------------------------------------------


@pytest.fixture
def busy_worker(make_worker_row, enqueue):
    worker = make_worker_row("w-gpu", concurrency=4, limits={"cpu": 2, "gpu_encode": 2}, vram=8000)
    uid, session = worker
    repository.worker_heartbeat(
        uid,
        session,
        {
            "cpu_percent": 42.0,
            "load_average": [1.5, 1.2, 1.0],
            "memory": {"total": 16 * 2**30, "used": 4 * 2**30, "percent": 25.0},
            "disk": {"total": 100 * 2**30, "free": 60 * 2**30, "percent": 40.0, "path": "/tmp"},
        },
    )
    job = enqueue("noop", {"seconds": 60})
    assert claim(worker) is not None
    return uid, job


def test_the_workers_page_shows_capacity_vram_and_the_sample(viewer_client, busy_worker):
    uid, _job = busy_worker
    html = viewer_client.get(reverse("dashboard:workers")).content.decode()
    assert f'data-worker="{uid}"' in html
    assert "1 / 4" in html  # media slots
    assert "0 / 8000 MB" in html  # VRAM (noop runs on cpu)
    assert "42% · load 1.5" in html
    assert "4.0 GB / 16.0 GB" in html
    assert "60.0 GB free" in html
    assert "data-action" not in html


def test_the_worker_page_lists_active_tasks_and_the_catalog(operator_client, busy_worker):
    uid, job = busy_worker
    html = operator_client.get(reverse("dashboard:worker", args=[uid])).content.decode()
    assert str(job)[:8] in html
    assert "Capability catalog" in html
    assert reverse("dashboard:worker_drain", args=[uid]) in html


def test_drain_marks_the_worker_draining_and_refuses_an_offline_one_with_409(
    operator_client, busy_worker, make_worker_row
):
    uid, _job = busy_worker
    url = reverse("dashboard:worker_drain", args=[uid])
    response = operator_client.post(url, HTTP_ACCEPT="application/json")
    assert response.status_code == 200 and response.json()["lifecycle"] == "draining"
    html = operator_client.get(reverse("dashboard:worker", args=[uid])).content.decode()
    assert 'class="badge b-retry">draining' in html
    assert url not in html  # no drain button for a draining worker

    gone, session = make_worker_row("w-gone")
    repository.set_session_lifecycle(gone, session, "offline")
    response = operator_client.post(
        reverse("dashboard:worker_drain", args=[gone]), HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 409
    assert "offline" in response.json()["detail"]
    assert (
        operator_client.post(
            reverse("dashboard:worker_drain", args=["nobody"]), HTTP_ACCEPT="application/json"
        ).status_code
        == 404
    )


def test_evacuate_moves_the_running_job_and_says_how_many(operator_client, busy_worker):
    uid, job = busy_worker
    page = operator_client.get(reverse("dashboard:worker", args=[uid])).content.decode()
    url = reverse("dashboard:worker_evacuate", args=[uid])
    assert url in page
    response = operator_client.post(url, HTTP_ACCEPT="application/json")
    assert response.status_code == 200 and response.json()["jobs_moved"] == 1
    assert "1 job(s) moved to other workers" in response.json()["detail"]
    assert Job.objects.get(pk=job).schedule.execution_id == 2
    again = operator_client.post(url, HTTP_ACCEPT="application/json")
    assert again.status_code == 200 and again.json()["jobs_moved"] == 0  # draining, nothing left
    missing = operator_client.post(
        reverse("dashboard:worker_evacuate", args=["nobody"]), HTTP_ACCEPT="application/json"
    )
    assert missing.status_code == 404


# --- overview and charts --------------------------------------------------------------------------


def test_the_overview_counts_jobs_by_state(viewer_client, enqueue):
    enqueue("noop")
    enqueue("noop")
    html = viewer_client.get(reverse("dashboard:overview")).content.decode()
    assert re.search(r'data-count="pending"><span class="tile-n">2</span>', html)
    assert "Collecting samples" in html and "(1 so far" in html  # the first was recorded just now
    assert QueueSample.objects.get().pending == 2


def test_the_overview_draws_samples_as_svg(viewer_client, db):
    now = timezone.now().replace(second=0, microsecond=0)
    for minutes in range(30):
        QueueSample.objects.create(
            at=now - timedelta(minutes=minutes),
            pending=minutes % 7,
            running=2,
            completed=3,
            failed=minutes % 2,
        )
    html = viewer_client.get(reverse("dashboard:overview") + "?hours=1").content.decode()
    assert html.count('<svg class="chart"') == 2
    assert 'class="s-completed"' in html and 'class="s-failed"' in html
    assert 'class="line s-pending"' in html and 'class="line s-running"' in html
    assert "Collecting samples" not in html
    assert viewer_client.get(reverse("dashboard:overview") + "?hours=999").status_code == 200


def test_buckets_sum_throughput_and_leave_gaps_in_depth():
    now = timezone.now().replace(second=0, microsecond=0)
    win = charts.window(6, now)
    assert win.count == 72 and win.bucket == timedelta(minutes=5)
    rows = [
        {
            "at": win.time(10),
            "completed": 2,
            "failed": 1,
            "pending": 4,
            "running": 1,
            "retry_wait": 0,
            "paused": 0,
        },
        {
            "at": win.time(10) + timedelta(minutes=1),
            "completed": 3,
            "failed": 0,
            "pending": 6,
            "running": 1,
            "retry_wait": 0,
            "paused": 0,
        },
    ]
    data = charts.bucketize(rows, win)
    assert data["completed"][10] == 5 and data["failed"][10] == 1
    assert data["completed"][11] == 0
    # Depth is the busiest sample of the bucket: whole jobs (6), never their average (5.0).
    assert data["pending"][10] == 6 and data["pending"][11] is None


def test_axis_maxima_round_up_to_a_nice_number():
    assert [charts.nice_max(v) for v in (0, 3, 5, 11, 26, 99, 101, 740)] == [4, 4, 5, 20, 50, 100, 200, 1000]


def test_a_gap_lifts_the_pen():
    now = timezone.now()
    win = charts.window(1, now)
    values = [1.0, 2.0, None, 3.0] + [None] * (win.count - 4)
    svg = charts.lines(win, [charts.Series("pending", values)], "t")
    path = re.search(r'd="([^"]+)"', svg).group(1)
    assert path.count("M") == 2 and path.count("L") == 1


def test_gridlines_fall_on_round_numbers():
    for top in (4, 5, 10, 20, 25, 50, 100, 200, 1000):
        step = top / charts.divisions(top)
        assert step == int(step), top


def test_the_default_window_fits_the_samples():
    now = timezone.now()
    assert charts.fitted_minutes(None, now) == 5  # nothing yet: the first sample fills a 5-minute chart
    assert charts.fitted_minutes(now - timedelta(minutes=3), now) == 5
    assert charts.fitted_minutes(now - timedelta(minutes=7), now) == 10
    assert charts.fitted_minutes(now - timedelta(minutes=50), now) == 60
    assert charts.fitted_minutes(now - timedelta(hours=30), now) == 360  # at most 6 h
    win = charts.window_minutes(5, now)
    assert win.count == 5 and win.bucket == timedelta(minutes=1)


def test_every_named_window_keeps_its_resolution():
    for hours, (bucket, label) in charts.RESOLUTION.items():
        assert charts.resolution(hours * 60) == (bucket, label), hours


def test_the_default_overview_is_fitted_and_a_named_window_is_kept(viewer_client, db):
    now = timezone.now().replace(second=0, microsecond=0)
    for minutes in range(20):
        QueueSample.objects.create(at=now - timedelta(minutes=minutes), pending=1)
    html = viewer_client.get(reverse("dashboard:overview")).content.decode()
    assert (
        'aria-current="true" title="The span of the samples recorded so far, up to 6 h" data-window="fit">fit · 30 min'
        in html
    )
    assert "last 30 min" in html and "hours=" not in html.split('id="live"')[1].split(">")[0]
    html = viewer_client.get(reverse("dashboard:overview") + "?hours=3").content.decode()
    assert 'aria-current="true" data-window="3"' in html and "last 3 h" in html
