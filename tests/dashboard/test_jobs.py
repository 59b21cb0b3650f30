"""/dashboard/jobs: the table and its filters, the create form, the job page and output files."""

import os
import re
import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from scheduler import repository
from scheduler.models import Job, JobOutput
from tests.kit.db import claim, lease_of

pytestmark = pytest.mark.django_db

JOBS = "/dashboard/jobs"


@pytest.fixture
def outputs(settings, tmp_path):
    settings.OUTPUT_ROOT_DIR = tmp_path / "outputs"
    settings.OUTPUT_ROOT_DIR.mkdir()
    return settings.OUTPUT_ROOT_DIR


def job_ids(html):
    return re.findall(r'<tr data-job-id="([0-9a-f-]+)"', html)


def make_older(job_ids):
    """Jobs made in one test share the transaction's now(); spread them one second apart, oldest first."""
    count = len(job_ids)
    for index, job_id in enumerate(job_ids):
        Job.objects.filter(pk=job_id).update(created_at=timezone.now() - timedelta(seconds=count - index))


def run_to_completion(worker, **finish):
    task = claim(worker)
    lease = lease_of(task, worker)
    assert repository.finish(lease, **finish).outcome == "completed"
    return task


# --- the table ------------------------------------------------------------------------------------


def test_the_table_shows_badges_progress_and_newest_first(viewer_client, enqueue):
    older, newer = enqueue("noop"), enqueue("noop")
    make_older([older, newer])
    html = viewer_client.get(JOBS).content.decode()
    assert job_ids(html) == [str(newer), str(older)]
    assert 'class="badge b-pending"' in html
    assert 'role="progressbar"' in html


def test_filters_by_status_type_category_and_worker(viewer_client, enqueue, make_worker_row):
    worker = make_worker_row("w-jobs")
    uid = worker[0]
    done = enqueue("noop")
    run_to_completion(worker)
    waiting = enqueue("noop", priority=5)
    gpu = enqueue("noop", required_category="gpu_encode", required_vram_mb=2000, hardware="gpu")

    assert job_ids(viewer_client.get(JOBS + "?status=completed").content.decode()) == [str(done)]
    assert set(job_ids(viewer_client.get(JOBS + "?status=pending").content.decode())) == {
        str(waiting),
        str(gpu),
    }
    assert job_ids(viewer_client.get(JOBS + "?resource_category=gpu_encode").content.decode()) == [str(gpu)]
    assert str(gpu) not in job_ids(viewer_client.get(JOBS + "?resource_category=cpu").content.decode())
    assert job_ids(viewer_client.get(JOBS + f"?worker={uid}").content.decode()) == [str(done)]
    assert job_ids(viewer_client.get(JOBS + "?type=scan").content.decode()) == []
    # unknown filter values are ignored, not errors
    assert viewer_client.get(JOBS + "?status=bogus&type=nope&resource_category=x").status_code == 200


def test_pagination_without_counting(viewer_client, enqueue):
    created = [enqueue("noop") for _ in range(27)]
    make_older(created)
    first = viewer_client.get(JOBS).content.decode()
    assert len(job_ids(first)) == 25
    assert "Older →" in first
    second = viewer_client.get(JOBS + "?page=2").content.decode()
    assert set(job_ids(second)) == {str(created[1]), str(created[0])}
    assert "← Newer" in second and "Older →" not in second
    assert viewer_client.get(JOBS + "?page=abc").status_code == 200


def test_ids_shows_just_those_jobs(viewer_client, enqueue):
    a, b, _c = enqueue("noop"), enqueue("noop"), enqueue("noop")
    html = viewer_client.get(JOBS + f"?ids={a},{b},not-a-uuid").content.decode()
    assert set(job_ids(html)) == {str(a), str(b)}
    assert "just created" in html


def test_the_table_polls_fast_only_while_something_is_unfinished(viewer_client, enqueue, make_worker_row):
    worker = make_worker_row("w-poll")
    enqueue("noop")
    assert 'data-poll="slow"' not in viewer_client.get(JOBS + "?partial=1").content.decode()
    run_to_completion(worker)
    assert 'data-poll="slow"' in viewer_client.get(JOBS + "?partial=1").content.decode()


# --- the create form ------------------------------------------------------------------------------


def test_the_form_comes_from_the_type_schema(operator_client):
    html = operator_client.get(reverse("dashboard:job_new") + "?type=noop").content.decode()
    for name in ("p.seconds", "p.fail_attempts", "p.children"):
        assert f'name="{name}"' in html
    assert 'max="3600"' in html  # seconds' bound, from the schema
    html = operator_client.get(reverse("dashboard:job_new") + "?type=transcode").content.decode()
    assert '<select id="f-preset" name="p.preset">' in html
    assert '<option value="veryfast" selected>' in html
    assert 'name="p.ladder"' in html  # a list of objects: JSON
    html = operator_client.get(reverse("dashboard:job_new") + "?type=compile_quad").content.decode()
    assert 'placeholder="one per line"' in html  # inputs: list of strings


def test_every_type_has_a_form(operator_client):
    from media.jobtypes import JOB_TYPES

    for job_type in JOB_TYPES:
        response = operator_client.get(reverse("dashboard:job_new") + f"?type={job_type}")
        assert response.status_code == 200, job_type
        assert f'name="type" value="{job_type}"' in response.content.decode()


def test_creating_a_noop_job_opens_its_page(operator_client, bob):
    response = operator_client.post(
        reverse("dashboard:job_new") + "?type=noop",
        {
            "type": "noop",
            "p.seconds": "1.5",
            "p.fail_attempts": "",
            "p.children": "2",
            "priority": "7",
            "max_attempts": "3",
            "hardware": "auto",
        },
    )
    assert response.status_code == 302
    job = Job.objects.select_related("schedule").get()
    assert response["Location"] == reverse("dashboard:job", args=[job.id])
    assert job.params == {"seconds": 1.5, "fail_attempts": 0, "children": 2}
    assert (job.schedule.priority, job.max_attempts, job.created_by) == (7, 3, bob)


def test_invalid_input_comes_back_with_the_schemas_messages(operator_client):
    response = operator_client.post(
        reverse("dashboard:job_new") + "?type=noop",
        {"type": "noop", "p.seconds": "-1", "p.children": "lots", "priority": "5000", "max_attempts": "4"},
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert "greater than or equal to 0" in html  # pydantic's message for seconds
    assert 'value="-1"' in html  # what was typed is kept
    assert "must be an integer from -1000 to 1000" in html
    assert Job.objects.count() == 0


def test_a_model_level_error_is_shown_at_the_top(operator_client):
    response = operator_client.post(
        reverse("dashboard:job_new") + "?type=validate", {"type": "validate", "priority": "0"}
    )
    assert response.status_code == 422
    assert "give exactly one of input" in response.content.decode()


def test_an_unknown_type_is_refused_not_replaced(operator_client):
    response = operator_client.post(reverse("dashboard:job_new"), {"type": "format_disk", "priority": "0"})
    assert response.status_code == 422
    assert "unknown job type" in response.content.decode()
    assert Job.objects.count() == 0


def test_json_fields_must_be_json(operator_client):
    response = operator_client.post(
        reverse("dashboard:job_new") + "?type=transcode",
        {"type": "transcode", "p.video_id": str(uuid.uuid4()), "p.ladder": "[{", "priority": "0"},
    )
    assert response.status_code == 422
    assert "is not valid JSON" in response.content.decode()


def test_an_unknown_worker_target_is_refused_on_its_field(operator_client):
    response = operator_client.post(
        reverse("dashboard:job_new") + "?type=noop",
        {"type": "noop", "required_worker_uid": "ghost", "priority": "0"},
    )
    assert response.status_code == 422
    assert 'class="field has-error"><label for="f-worker">' in response.content.decode()


def test_the_viewer_sees_no_form(viewer_client):
    html = viewer_client.get(reverse("dashboard:job_new")).content.decode()
    assert "read-only access" in html
    assert 'id="job-form"' not in html


# --- the job page ---------------------------------------------------------------------------------


def test_the_job_page_shows_stages_logs_and_controls(operator_client, enqueue, make_worker_row):
    worker = make_worker_row("w-page")
    job = enqueue("noop", {"seconds": 30})
    task = claim(worker)
    lease = lease_of(task, worker)
    repository.report_progress(lease, 40, lines=["sleeping for 30 s", "<script>alert(1)</script>"])
    html = operator_client.get(reverse("dashboard:job", args=[job])).content.decode()
    assert 'data-job-status="running"' in html
    assert 'aria-valuenow="40"' in html
    assert "sleeping for 30 s" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert "claimed by w-page" in html  # the job log
    assert f'data-task-id="{task.id}"' in html
    assert reverse("dashboard:job_action", args=[job, "cancel"]) in html
    assert reverse("dashboard:job_action", args=[job, "redispatch"]) in html
    assert 'data-poll="stop"' not in html


def test_a_finished_job_page_stops_polling_and_offers_no_controls(operator_client, enqueue, make_worker_row):
    worker = make_worker_row("w-done")
    job = enqueue("noop")
    run_to_completion(worker)
    html = operator_client.get(reverse("dashboard:job", args=[job]) + "?partial=1").content.decode()
    assert 'data-poll="stop"' in html
    assert "data-action" not in html


def test_redispatch_starts_a_new_execution(operator_client, enqueue, make_worker_row):
    worker = make_worker_row("w-lost")
    job = enqueue("noop", {"seconds": 30})
    assert claim(worker) is not None
    response = operator_client.post(
        reverse("dashboard:job_action", args=[job, "redispatch"]), HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 200
    assert Job.objects.select_related("schedule").get(pk=job).schedule.execution_id == 2


def test_outputs_are_shown_as_images_and_playable_video(viewer_client, enqueue, make_worker_row, outputs):
    worker = make_worker_row("w-out")
    job = enqueue("noop")
    directory = outputs / str(job)
    directory.mkdir()
    (directory / "thumb.jpg").write_bytes(b"\xff\xd8\xff fake jpeg")
    (directory / "clip.mp4").write_bytes(b"\x00" * 2048)
    (directory / "segments.json").write_text("[]")
    run_to_completion(
        worker,
        outputs=[
            repository.Output("thumb.jpg", "image", 14),
            repository.Output("clip.mp4", "video", 2048),
            repository.Output("segments.json", "data", 2),
        ],
    )
    assert JobOutput.objects.filter(job_id=job).count() == 3
    html = viewer_client.get(reverse("dashboard:job", args=[job])).content.decode()
    assert f'<img src="{reverse("dashboard:job_output", args=[job, "thumb.jpg"])}"' in html
    assert (
        f'<video controls preload="metadata" src="{reverse("dashboard:job_output", args=[job, "clip.mp4"])}"'
        in html
    )
    assert reverse("dashboard:job_output", args=[job, "segments.json"]) in html


def test_the_output_view_serves_files_inline_with_ranges(viewer_client, enqueue, outputs):
    job = enqueue("noop")
    (outputs / str(job)).mkdir()
    (outputs / str(job) / "clip.mp4").write_bytes(bytes(range(256)) * 4)
    url = reverse("dashboard:job_output", args=[job, "clip.mp4"])
    response = viewer_client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "video/mp4"
    assert b"".join(response.streaming_content) == bytes(range(256)) * 4
    assert "sandbox" in response["Content-Security-Policy"]

    part = viewer_client.get(url, HTTP_RANGE="bytes=10-19")
    assert part.status_code == 206
    assert part["Content-Range"] == "bytes 10-19/1024"
    assert b"".join(part.streaming_content) == bytes(range(10, 20))
    assert viewer_client.get(url, HTTP_RANGE="bytes=-4").status_code == 206
    assert viewer_client.get(url, HTTP_RANGE="bytes=5000-").status_code == 416


def test_unknown_output_types_download_instead_of_rendering(viewer_client, enqueue, outputs):
    job = enqueue("noop")
    (outputs / str(job)).mkdir()
    (outputs / str(job) / "page.html").write_text("<script>alert(1)</script>")
    response = viewer_client.get(reverse("dashboard:job_output", args=[job, "page.html"]))
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment")


def test_the_output_view_refuses_everything_outside_the_jobs_directory(
    viewer_client, enqueue, outputs, tmp_path
):
    job, other = enqueue("noop"), enqueue("noop")
    (outputs / str(job)).mkdir()
    (outputs / str(other)).mkdir()
    (outputs / str(other) / "secret.txt").write_text("other job")
    (tmp_path / "outside.txt").write_text("outside")
    os.symlink(tmp_path / "outside.txt", outputs / str(job) / "link.txt")
    os.symlink(outputs / str(other), outputs / str(job) / "otherdir")
    (outputs / str(job) / ".partial.mp4").write_bytes(b"x")
    base = f"/dashboard/jobs/{job}/outputs/"
    for name in [
        "../" + str(other) + "/secret.txt",
        "..%2f" + str(other) + "%2fsecret.txt",
        "link.txt",
        "otherdir/secret.txt",
        ".partial.mp4",
        "missing.mp4",
        "%2e%2e/%2e%2e/etc/passwd",
        "/etc/passwd",
        "",
    ]:
        response = viewer_client.get(base + name)
        assert response.status_code == 404, name
    # a job that does not exist has no outputs at all
    assert viewer_client.get(f"/dashboard/jobs/{uuid.uuid4()}/outputs/x.mp4").status_code == 404


def test_the_output_view_needs_login(client, enqueue):
    job = enqueue("noop")
    response = client.get(reverse("dashboard:job_output", args=[job, "clip.mp4"]))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


# --- issue 35: what a newcomer meets ----------------------------------------------------------------


def test_the_jobs_table_says_what_each_job_works_on_and_offers_re_run_and_outputs(
    operator_client, enqueue, make_worker_row
):
    from media.models import MediaAsset

    asset = MediaAsset.objects.create(path="videos/a.mp4", title="A clip", directory="videos")
    worker = make_worker_row()
    finished = enqueue("noop")
    run_to_completion(worker)
    by_path = enqueue("transcode", {"input": "videos/b.mp4"})
    by_asset = enqueue("thumbnail_generate", {"video_id": str(asset.id)})
    scan = enqueue("scan", {"directory": "videos"})
    JobOutput.objects.create(job_id=finished, execution_id=1, task_id=1, name="x.txt", size_bytes=1)
    html = operator_client.get(JOBS).content.decode()
    inputs = dict(
        re.findall(r'<tr data-job-id="([0-9a-f-]+)".*?<td class="job-input">(.*?)</td>', html, re.S)
    )
    assert "videos/b.mp4" in inputs[str(by_path)]
    assert "A clip" in inputs[str(by_asset)]
    assert "videos/" in inputs[str(scan)]
    assert "—" in inputs[str(finished)]
    row = re.search(rf'<tr data-job-id="{finished}".*?</tr>', html, re.S)[0]
    assert f'href="/dashboard/jobs/new?from={finished}"' in row and "Re-run" in row
    assert f'href="/dashboard/jobs/{finished}#outputs"' in row and "Outputs (1)" in row
    unfinished = re.search(rf'<tr data-job-id="{by_path}".*?</tr>', html, re.S)[0]
    assert "Re-run" not in unfinished and "Cancel" in unfinished


def test_the_form_starts_with_transcode_and_labels_in_words(operator_client):
    html = operator_client.get(reverse("dashboard:job_new")).content.decode()
    assert 'name="type" value="transcode"' in html
    labels = re.findall(r'<label for="f-[a-z_]+">([^<*]+)', html)
    assert {"CRF", "Minimum VMAF", "Target VMAF", "Audio bitrate (kbit/s)"} <= {
        label.strip() for label in labels
    }
    assert "Crf" not in labels and "Min Vmaf" not in labels
    assert "data-ladder-json" in html and 'name="p.quality_metrics" value="vmaf" checked' in html


def test_metric_checkboxes_post_what_is_ticked_and_none_turns_measuring_off():
    from django.http import QueryDict

    from dashboard.forms import JobForm

    ticked = QueryDict("type=transcode&p.quality_metrics=vmaf&p.quality_metrics=ssim")
    assert JobForm.for_type("transcode").payload(ticked)["params"]["quality_metrics"] == ["vmaf", "ssim"]
    assert (
        JobForm.for_type("transcode").payload(QueryDict("type=transcode"))["params"]["quality_metrics"] == []
    )


def test_re_run_opens_the_form_filled_in_from_the_job(operator_client):
    from media.submission import create_job

    job = create_job(None, {"type": "noop", "params": {"seconds": 2.5, "children": 1}, "priority": 9})
    html = operator_client.get(reverse("dashboard:job_new") + f"?from={job.id}").content.decode()
    assert f'data-rerun-of="{job.id}"' in html
    assert 'name="type" value="noop"' in html
    assert 'name="p.seconds" value="2.5"' in html and 'name="p.children" value="1"' in html
    assert 'name="priority" value="9"' in html
    # An unknown or malformed id falls back to the empty form.
    for bad in (uuid.uuid4(), "nope"):
        html = operator_client.get(reverse("dashboard:job_new") + f"?from={bad}").content.decode()
        assert 'name="type" value="transcode"' in html and "data-rerun-of" not in html


def test_ladder_errors_name_the_rung(operator_client):
    response = operator_client.post(
        reverse("dashboard:job_new"),
        {
            "type": "transcode",
            "p.ladder": '[{"height": 360}, {"height": 90}]',
            "priority": "0",
            "max_attempts": "4",
        },
    )
    assert response.status_code == 422
    assert "rung 2 height: Input should be greater than or equal to 144" in response.content.decode()


def test_the_failed_stage_ends_the_stage_logs(operator_client, enqueue, make_worker_row):
    job = enqueue("noop", max_attempts=1)
    worker = make_worker_row()
    task = claim(worker)
    assert repository.fail(lease_of(task, worker), "RuntimeError: it broke").outcome == "failed"
    html = operator_client.get(reverse("dashboard:job", args=[job])).content.decode()
    assert "no stage output" not in html
    assert re.search(r"data-stage-failure>\[noop #\d+\] failed \(attempt 1/1\): it broke<", html), html[
        html.index("Stage logs") :
    ][:800]
