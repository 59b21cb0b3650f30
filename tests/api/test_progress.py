"""A job's progress is the weighted progress of all its stages (scheduler/sql/functions/15_progress.sql):
below 100 until it completes, never backwards within an execution, the same number everywhere."""

import json

import pytest
from django.db import connection

from media.jobtypes import JOB_TYPES
from scheduler import repository
from tests.kit.db import claim, lease_of

pytestmark = pytest.mark.django_db


def progress_everywhere(api, job_id) -> int:
    """The job's progress as the API shows it in its detail, the jobs list and the queue entry."""
    detail = api.get(f"/v2/jobs/{job_id}").json()
    (listed,) = [j for j in api.get("/v2/jobs", {"limit": 500}).json()["data"] if j["id"] == str(job_id)]
    figures = {detail["progress"], listed["progress"]}
    if detail["queue"] is not None:
        figures.add(detail["queue"]["progress"])
    assert len(figures) == 1, figures
    return figures.pop()


def rendition(height, width):
    return repository.Child(
        "transcode.rendition", {"name": f"{height}p", "width": width, "height": height, "duration": 60.0}
    )


def test_a_transcode_is_weighted_by_its_stages_and_renditions_by_pixels(viewer_api, enqueue, worker):
    # Measuring off, so the plan is the five stages below (the quality stage's share goes to the
    # renditions); test_measuring_quality_has_its_own_share covers the default.
    job = enqueue("transcode", {"input": "videos/demo.mp4", "quality_metrics": []})
    dispatch = lease_of(claim(worker), worker)
    repository.report_progress(dispatch, 50.0)
    assert progress_everywhere(viewer_api, job) == 2  # half of the dispatch's 5 %
    children = [
        rendition(1080, 1920),
        rendition(720, 1280),
        repository.Child("transcode.thumbnail", {"duration": 60.0}),
        repository.Child("transcode.package", {"duration": 60.0}, pool="background", wait_for_siblings=True),
    ]
    assert repository.finish(dispatch, children=children).outcome == "completed"
    # The dispatch is done, four stages wait, the upload does not exist yet: 5 %, not 100 %.
    assert progress_everywhere(viewer_api, job) == 5

    big, small = (lease_of(claim(worker), worker) for _ in range(2))
    assert (big.task_id, small.task_id) == tuple(sorted((big.task_id, small.task_id)))
    repository.report_progress(big, 50.0)  # 1080p: 2.25 × the pixels of 720p
    repository.report_progress(small, 100.0)
    # renditions (2.25 × 50 + 1 × 100) / 3.25 = 65.4 % of their 75 % share, + the dispatch's 5 %
    assert progress_everywhere(viewer_api, job) == 54

    repository.finish(big)
    repository.finish(small)
    thumbnail = lease_of(claim(worker), worker)
    repository.finish(thumbnail)
    package = lease_of(claim(worker, pool="background"), worker)
    upload = repository.Child("transcode.upload", {"renditions": ["1080p", "720p"]}, pool="background")
    repository.finish(package, children=[upload])
    assert progress_everywhere(viewer_api, job) == 90  # everything but the upload's 10 %

    upload_lease = lease_of(claim(worker, pool="background"), worker)
    repository.report_progress(upload_lease, 99.9)
    assert progress_everywhere(viewer_api, job) == 99  # never 100 before the job completes
    assert repository.finish(upload_lease).outcome == "completed"
    assert progress_everywhere(viewer_api, job) == 100


def test_a_noop_with_children_counts_them_before_they_exist(viewer_api, enqueue, worker):
    job = enqueue("noop", {"seconds": 1, "children": 3})
    dispatch = lease_of(claim(worker), worker)
    repository.finish(dispatch, children=[repository.Child("noop", {"i": i}) for i in range(3)])
    assert progress_everywhere(viewer_api, job) == 25  # one share of four
    first = lease_of(claim(worker), worker)
    repository.report_progress(first, 100.0)
    assert progress_everywhere(viewer_api, job) == 50


def test_progress_never_goes_backwards_within_an_execution(viewer_api, enqueue, worker):
    job = enqueue("noop", {"seconds": 1}, max_attempts=3)
    task = lease_of(claim(worker), worker)
    repository.report_progress(task, 80.0)
    assert progress_everywhere(viewer_api, job) == 80
    repository.fail(task, "transient", retryable=True)  # the retry starts the stage at 0 again
    assert progress_everywhere(viewer_api, job) == 80
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_tasks SET available_at = now() WHERE job_id = %s", [job])
        cursor.execute("SELECT refresh_job_v1(%s)", [job])
    retry = lease_of(claim(worker), worker)
    repository.report_progress(retry, 10.0)
    assert progress_everywhere(viewer_api, job) == 80


def test_measuring_quality_has_its_own_share():
    with connection.cursor() as cursor:
        for job_type, encode in (
            ("transcode", "transcode.rendition"),
            ("reencode_streaming", "reencode_streaming.encode"),
        ):
            cursor.execute(
                "SELECT progress_plan_v1(%s, '{}'), progress_plan_v1(%s, '{\"quality_metrics\": []}')",
                [job_type, job_type],
            )
            measured, unmeasured = (json.loads(p) if isinstance(p, str) else p for p in cursor.fetchone())
            quality = f"{job_type}.quality"
            assert measured[quality] > 0 and unmeasured[quality] == 0
            # The encodes take the quality stage's share back: the other stages weigh the same.
            assert unmeasured[encode] == measured[encode] + measured[quality]
            assert sum(measured.values()) == sum(unmeasured.values())


def test_every_job_type_has_a_plan_naming_its_stages():
    with connection.cursor() as cursor:
        for name, job_type in JOB_TYPES.items():
            cursor.execute("SELECT progress_plan_v1(%s, %s::jsonb)", [name, '{"children": 2}'])
            (plan,) = cursor.fetchone()
            plan = json.loads(plan) if isinstance(plan, str) else plan
            assert plan is not None, f"{name} has no progress plan in 15_progress.sql"
            assert set(plan) == {"dispatch", *job_type.stages[1:]} | ({"noop"} if name == "noop" else set())
            assert all(share > 0 for share in plan.values()), name


def chunk(index, seconds=10.0):
    payload = {"chunk": {"index": index}, "duration": seconds, "width": 1280, "height": 720, "scratch": True}
    return repository.Child("transcode.chunk", payload, placement="cluster")


def test_a_split_transcode_counts_frames_across_chunks_and_a_restarted_chunk_gives_them_back(
    viewer_api, enqueue, worker
):
    """Issue 33: chunks count in the renditions' share by their frames, on any worker; a chunk that
    starts over gives its frames back, so the job's progress goes down, and the detail says why."""
    job = enqueue("transcode", {"input": "videos/demo.mp4", "quality_metrics": []})
    dispatch = lease_of(claim(worker), worker)
    children = [chunk(0, 30.0), chunk(1, 10.0), repository.Child("transcode.thumbnail", {"duration": 40.0})]
    children.append(
        repository.Child("transcode.stitch", {"duration": 40.0}, pool="background", wait_for_siblings=True)
    )
    children = [
        repository.Child(
            c.task_type, c.payload, placement="cluster", pool=c.pool, wait_for_siblings=c.wait_for_siblings
        )
        for c in children
    ]
    assert repository.finish(dispatch, children=children).outcome == "completed"
    # Every stage is cluster: the job left its dispatching worker's group.
    assert viewer_api.get(f"/v2/jobs/{job}").json()["queue"]["group"] is None
    long_chunk, short_chunk = (lease_of(claim(worker), worker) for _ in range(2))
    repository.report_progress(long_chunk, 80.0)
    repository.report_progress(short_chunk, 100.0)
    # chunks (3 × 80 + 1 × 100) / 4 = 85 % of the renditions' 75 % share, + the dispatch's 5 %
    before = progress_everywhere(viewer_api, job)
    assert before == 68
    # The long chunk's attempt fails (its worker lost it): it starts over and its frames go back.
    assert repository.fail(long_chunk, "lease expired", retryable=True).outcome == "retry_wait"
    with connection.cursor() as cursor:
        cursor.execute("UPDATE queue_tasks SET available_at = now() WHERE id = %s", [long_chunk.task_id])
    again = lease_of(claim(worker), worker)
    assert again.task_id == long_chunk.task_id
    repository.report_progress(again, 10.0)
    after = progress_everywhere(viewer_api, job)
    assert after == 5 + int(75 * (3 * 10 + 1 * 100) / 4 / 100) < before
    assert "chunk 0 restarted" in viewer_api.get(f"/v2/jobs/{job}").json()["progress_note"]
