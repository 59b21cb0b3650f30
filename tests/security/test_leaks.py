"""What leaks no more: the worker's environment into FFmpeg, webhook tokens, file paths and FFmpeg
command lines to viewers, resolved addresses in the webhook 422, receivers' error bodies in stage
logs; 6to4 and site-local IPv6 count as private; /v2/jobs refuses deep offsets.
"""

from __future__ import annotations

import ipaddress
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from media import webhooks
from scheduler.models import Job, JobOutput, QueueTask, TaskLog
from workers import processes
from workers.stages.webhook import webhook as webhook_stage

pytestmark = pytest.mark.django_db

SECRET_QUERY = "token=s3cret-query-value"
OUTPUT_PATH = "/srv/jetencode/outputs"
COMMAND = (
    "transcode 720p: /usr/local/bin/ffmpeg -nostdin -nostats -hide_banner -progress pipe:1 -y "
    "-i /srv/jetencode/workspace/j/1/input/source.mp4 -c:v libx264 /srv/jetencode/workspace/j/1/720p.mp4"
)


def test_stage_processes_get_a_minimal_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DATABASE_URL", "postgresql://user:pw@db/jetencode")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("JETENCODE_SECRET_KEY", "django-secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    group = processes.start(["env"], cwd=tmp_path)
    out, _err = group.popen.communicate(timeout=30)
    processes.forget_if_finished(group)
    names = {line.split("=", 1)[0] for line in out.decode().splitlines() if "=" in line}
    assert {"DATABASE_URL", "AWS_SECRET_ACCESS_KEY", "JETENCODE_SECRET_KEY"}.isdisjoint(names), names
    assert {"PATH", "LC_ALL"} <= names


@pytest.fixture
def leaky_job(enqueue):
    """A job as a worker leaves it: a webhook URL with a token, a file:// output, FFmpeg command
    lines and absolute paths in its job and stage logs."""
    job_id = enqueue("noop", {}, webhook_url=f"https://hooks.example.com/jet?{SECRET_QUERY}")
    Job.objects.filter(pk=job_id).update(
        log=f"{COMMAND}\nfailed reading {OUTPUT_PATH}/{job_id}/x.mp4\n", last_error=f"{OUTPUT_PATH}/x: EIO"
    )
    task = QueueTask.objects.filter(job_id=job_id).first()
    TaskLog.objects.create(task=task, at=datetime.now(UTC), message=COMMAND)
    JobOutput.objects.create(
        job_id=job_id,
        execution_id=1,
        task_id=task.pk,
        name="renditions/720p.mp4",
        storage_url=f"file://{OUTPUT_PATH}/{job_id}/renditions/720p.mp4",
    )
    return job_id


def _texts(caller, job_id) -> list[str]:
    paths = [f"/v2/jobs/{job_id}", "/v2/jobs", f"/v2/jobs/{job_id}/tasks?log_lines=50"]
    responses = [caller.request("GET", path) for path in paths]
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    return [r.content.decode() for r in responses]


@pytest.mark.parametrize("transport", ["token", "session"])
def test_viewers_see_no_webhook_query_file_paths_or_ffmpeg_argv(caller, leaky_job, transport):
    for text in _texts(caller("viewer", transport), leaky_job):
        assert SECRET_QUERY not in text
        assert OUTPUT_PATH not in text and "/srv/jetencode" not in text
        assert "-nostdin" not in text
    detail = caller("viewer", transport).request("GET", f"/v2/jobs/{leaky_job}").json()
    assert detail["webhook_url"] == "https://hooks.example.com"  # scheme and host only (issue 37)
    assert detail["outputs"][0]["storage_url"] == f"/dashboard/jobs/{leaky_job}/outputs/renditions/720p.mp4"
    assert "FFmpeg command hidden" in " ".join(detail["log_tail"])


def test_operators_still_see_everything(caller, leaky_job):
    detail, listing, tasks = _texts(caller("operator", "token"), leaky_job)
    assert SECRET_QUERY in detail and SECRET_QUERY in listing
    assert f"file://{OUTPUT_PATH}" in detail and "-nostdin" in detail and "-nostdin" in tasks


def test_the_webhook_422_does_not_say_what_a_name_resolves_to(caller):
    response = caller("operator", "token").request(
        "POST", "/v2/jobs", {"type": "noop", "webhook_url": "http://localhost:8000/hook"}
    )
    assert response.status_code == 422
    message = response.json()["errors"][0]["message"]
    assert "not a public address" in message
    assert "127.0.0.1" not in message and "::1" not in message


@pytest.mark.parametrize(
    "address",
    ["2002:7f00:1::1", "2002:0a00:0001::", "2002:c0a8:0101::5", "2002:a9fe:a9fe::", "fec0::1", "fec0:1:2::3"],
)
def test_6to4_with_a_private_ipv4_and_site_local_are_not_public(caller, address):
    assert not webhooks.address_is_public(ipaddress.ip_address(address))
    response = caller("operator", "token").request(
        "POST", "/v2/jobs", {"type": "noop", "webhook_url": f"http://[{address}]/hook"}
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "webhook_url"


def test_6to4_of_a_public_ipv4_stays_public():
    assert webhooks.address_is_public(ipaddress.ip_address("2002:0808:0808::1"))  # 8.8.8.8


class _Context:
    """The little of a StageContext the webhook stage uses; log lines are kept to be read."""

    def __init__(self, url):
        self.payload = {"url": url, "event": "job.failed", "job": {"id": "j"}, "webhook_id": "msg_x"}
        self.job_id, self.task_id, self.lines = "j", 1, []

    def log(self, line):
        self.lines.append(line)

    def progress(self, value):
        pass


def test_a_receivers_error_body_stays_out_of_the_stage_log(settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"internal error: session=receiver-secret-cookie"
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        ctx = _Context(f"http://127.0.0.1:{server.server_address[1]}/hook?{SECRET_QUERY}")
        with pytest.raises(RuntimeError, match="answered 500"):
            webhook_stage(ctx)
    finally:
        server.shutdown()
        server.server_close()
    text = "\n".join(ctx.lines)
    assert "500" in text
    assert "receiver-secret-cookie" not in text and SECRET_QUERY not in text


def test_deep_offsets_on_the_job_list_are_422_naming_the_page(caller):
    api = caller("viewer", "token")
    assert api.request("GET", "/v2/jobs?page=21&limit=500").status_code == 200  # offset 10,000
    response = api.request("GET", "/v2/jobs?page=22&limit=500")
    assert response.status_code == 422
    body = response.json()
    assert body["errors"][0]["field"] == "page" and "offset" in body["errors"][0]["message"]
    assert api.request("GET", "/v2/jobs?page=100000&limit=500").status_code == 422
