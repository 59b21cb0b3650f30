"""A failed job says what failed in one line (API, webhook); the traceback stays in the task history."""

import pytest

from media import failures
from scheduler import repository
from tests.kit.db import claim, lease_of

pytestmark = pytest.mark.django_db


def traceback_failure(settings, job_id):
    """What the worker stores for a crashed stage (workers.outcome.failure_text)."""
    source = f"{settings.WORKSPACE_ROOT_DIR}/{job_id}/1/renditions/360p.mp4"
    return (
        f"RuntimeError: ffmpeg exited with status 1 while encoding {source}\n\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/jetencode/workers/runtime.py", line 570, in _execute\n'
        "    result = handler(ctx)\n"
        f"RuntimeError: ffmpeg exited with status 1 while encoding {source}\n"
    )


@pytest.fixture
def crashed_job(enqueue, worker, settings):
    job_id = enqueue(max_attempts=1)
    lease = lease_of(claim(worker), worker)
    assert repository.fail(lease, traceback_failure(settings, job_id), retryable=False).outcome == "failed"
    return job_id


EXPECTED = "noop failed: ffmpeg exited with status 1 while encoding renditions/360p.mp4"


def test_the_job_detail_and_list_give_one_line(viewer_api, crashed_job):
    detail = viewer_api.get(f"/v2/jobs/{crashed_job}").json()
    assert detail["last_error"] == EXPECTED
    assert (
        detail["stages"][0]["last_failure"]
        == "ffmpeg exited with status 1 while encoding renditions/360p.mp4"
    )
    (listed,) = viewer_api.get("/v2/jobs", {"status": "failed"}).json()["data"]
    assert listed["last_error"] == EXPECTED


def test_the_traceback_stays_in_the_task_history_for_operators(operator_api, viewer_api, crashed_job):
    (task,) = operator_api.get(f"/v2/jobs/{crashed_job}/tasks").json()["data"]
    assert "Traceback (most recent call last)" in task["last_failure"]
    # Viewers get the one line of words (issue 37: tracebacks only for operators).
    (task,) = viewer_api.get(f"/v2/jobs/{crashed_job}/tasks").json()["data"]
    assert task["last_failure"] and "Traceback" not in task["last_failure"]


def test_the_failed_webhook_gives_one_line(crashed_job):
    from workers.stages.webhook import job_summary

    assert job_summary(str(crashed_job))["error"] == EXPECTED


@pytest.mark.parametrize(
    "stored, stage, words",
    [
        (None, "x", None),
        ("", None, None),
        ("lost its worker 3 times (max_attempts 3)", None, "lost its worker 3 times (max_attempts 3)"),
        (
            "workers.stages.base.PermanentFailure: input is not a video",
            "scan",
            "scan failed: input is not a video",
        ),
        ("StageTimeout: no progress for 120 s\n\nTraceback ...", None, "no progress for 120 s"),
        ("Traceback (most recent call last):\n  File x\nValueError: bad rung", None, "bad rung"),
        ("x" * 1000, None, "x" * 299 + "…"),
    ],
)
def test_one_line(stored, stage, words):
    assert failures.one_line(stored, stage) == words
