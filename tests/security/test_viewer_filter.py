"""One viewer filter for the API and the dashboard (issue 37, item 2).

A viewer (on a token or the dashboard session) and a *read* token, even an operator's, see webhook
URLs as scheme and host only (whatever the scheme's case), no FFmpeg argv or absolute path in any
log line (timestamps in front included), failures without their traceback, no file:// location and
no filesystem path of a worker. Operators on their session or an operate token see everything.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from media import disclosure
from scheduler.models import Job, JobOutput, QueueTask, TaskLog
from tests.kit.personas import in_role
from tests.kit.web import Api, issue_token

pytestmark = pytest.mark.django_db

SLACK_PATH = "/services/T0AAAA/B0BBBB/XyZsecretPathPart"
SECRET_QUERY = "token=s3cret-query-value"
WEBHOOK = f"HTTPS://Hooks.Example.com{SLACK_PATH}?{SECRET_QUERY}"
SECRET_DIR = "/srv/jetencode"
TIMESTAMPED = [
    # As a worker may log them: a timestamp first, then the stage and FFmpeg's argv.
    f"2026-12-04 14:00:01,123 transcode 720p: /usr/local/bin/ffmpeg -nostdin -y -i {SECRET_DIR}/ws/j/1/in.mp4 "
    f"-c:v libx264 {SECRET_DIR}/ws/j/1/720p.mp4",
    f"[14:00:02] running ['{SECRET_DIR}/bin/ffmpeg', '-hide_banner', '-i', '{SECRET_DIR}/ws/in.mp4']",
    f"14:00:03 ffprobe -v error {SECRET_DIR}/ws/x.mp4",
    f"14:00:04 could not open file:{SECRET_DIR}/etc/passwd (EACCES)",
    f"14:00:05 delivered to {WEBHOOK}",
    f"14:00:06 wrote {SECRET_DIR}/outputs/j/thumbnail.jpg",
]
TRACEBACK = (
    f"RuntimeError: disk full at {SECRET_DIR}/outputs/x.mp4\n"
    "Traceback (most recent call last):\n"
    f'  File "{SECRET_DIR}/app/workers/slots.py", line 42, in run\n'
    "    raise RuntimeError('disk full')\n"
)
FORBIDDEN = [
    SECRET_QUERY,
    SLACK_PATH,
    "XyZsecretPathPart",
    SECRET_DIR,
    "-nostdin",
    "-hide_banner",
    "Traceback",
]


@pytest.fixture
def leaky_job(enqueue, make_worker_row):
    job_id = enqueue("noop", {}, webhook_url=WEBHOOK)
    Job.objects.filter(pk=job_id).update(log="\n".join(TIMESTAMPED) + "\n", last_error=TRACEBACK)
    task = QueueTask.objects.filter(job_id=job_id).first()
    QueueTask.objects.filter(pk=task.pk).update(last_failure=TRACEBACK)
    for line in TIMESTAMPED:
        TaskLog.objects.create(task=task, at=datetime.now(UTC), message=line)
    JobOutput.objects.create(
        job_id=job_id,
        execution_id=1,
        task_id=task.pk,
        name="thumbnail.jpg",
        storage_url=f"FILE://{SECRET_DIR}/outputs/{job_id}/thumbnail.jpg",
    )
    return job_id


def _read_token_of(role: str) -> Api:
    from django.test import Client

    return Api(Client(), issue_token(in_role(role), scope="read"))


def _assert_clean(text: str, where: str) -> None:
    leaked = [secret for secret in FORBIDDEN if secret in text]
    assert leaked == [], f"{where} shows {leaked}"


@pytest.mark.parametrize("who", ["viewer-token", "viewer-session", "operator-read-token"])
def test_the_api_shows_no_query_argv_path_or_traceback(caller, leaky_job, who):
    client = _read_token_of("operator") if who == "operator-read-token" else caller(*who.split("-"))
    for path in (f"/v2/jobs/{leaky_job}", "/v2/jobs", f"/v2/jobs/{leaky_job}/tasks?log_lines=50"):
        response = client.get(path) if isinstance(client, Api) else client.request("GET", path)
        assert response.status_code == 200, (path, response.status_code)
        _assert_clean(response.content.decode(), f"{who} {path}")
    detail = (client.get if isinstance(client, Api) else lambda p: client.request("GET", p))(
        f"/v2/jobs/{leaky_job}"
    ).json()
    assert detail["webhook_url"] == "https://hooks.example.com"
    assert detail["outputs"][0]["storage_url"] == f"/dashboard/jobs/{leaky_job}/outputs/thumbnail.jpg"
    assert any(disclosure.HIDDEN_COMMAND in line for line in detail["log_tail"])


def test_read_tokens_see_no_worker_or_host_paths(leaky_job, make_worker_row):
    make_worker_row()
    api = _read_token_of("operator")
    for path in ("/v2/workers", "/v1/sysinfo"):
        response = api.get(path)
        assert response.status_code == 200
        text = response.content.decode()
        assert '"/' not in text, (path, text[:500])  # no JSON string value starts with a path


def test_operators_see_everything(caller, leaky_job):
    text = (
        caller("operator", "token")
        .request("GET", f"/v2/jobs/{leaky_job}/tasks?log_lines=50")
        .content.decode()
    )
    assert SECRET_QUERY in text and "-nostdin" in text and "Traceback" in text


def test_the_dashboard_job_page_as_a_viewer(caller, leaky_job):
    viewer = caller("viewer", "session")
    for path in (f"/dashboard/jobs/{leaky_job}", f"/dashboard/jobs/{leaky_job}?partial=1"):
        response = viewer.request("GET", path)
        assert response.status_code == 200, path
        text = response.content.decode()
        _assert_clean(text, f"dashboard {path}")
        assert "file://" not in text.lower()
    page = viewer.request("GET", f"/dashboard/jobs/{leaky_job}").content.decode()
    assert "https://hooks.example.com" in page and disclosure.HIDDEN_COMMAND in page
    # Operators still get the traceback and the full URL on the same page.
    operator_page = (
        caller("operator", "session").request("GET", f"/dashboard/jobs/{leaky_job}").content.decode()
    )
    assert "Traceback" in operator_page and "XyZsecretPathPart" in operator_page


def test_the_dashboard_worker_pages_as_a_viewer(caller, make_worker_row):
    uid, _session = make_worker_row()
    viewer = caller("viewer", "session")
    for path in ("/dashboard/workers", f"/dashboard/workers/{uid}"):
        response = viewer.request("GET", path)
        assert response.status_code == 200, path
        assert "<code>/tmp</code>" not in response.content.decode(), path  # the row's workspace
    operator_page = caller("operator", "session").request("GET", f"/dashboard/workers/{uid}")
    assert "<code>/tmp</code>" in operator_page.content.decode()


@pytest.mark.parametrize(
    "line, kept",
    [
        ("2026-12-04T14:00:00Z x: /usr/bin/ffmpeg -i /a/b.mp4 out.mp4", "2026-12-04T14:00:00Z x:"),
        ("input linked into the workspace as input/source.mp4 (10 bytes)", "input/source.mp4"),
        ("see https://example.com/a/b?c=d and Http://Other.example:8080/x", "https://example.com"),
        ("ratio 1/2 of a/b", "ratio 1/2 of a/b"),
    ],
)
def test_log_line_rules(line, kept):
    shown = disclosure.log_line(line)
    assert kept in shown
    assert "/usr/bin" not in shown and "/a/b.mp4" not in shown and "?c=d" not in shown and "/x" not in shown
