"""Sources from outside the media root, end to end with real clients and a real worker process:

- tuspy (tus-py-client) uploads a clip in several PATCHes through a link that drops one connection
  midway; it resumes from the offset the server reports, and the asset transcodes;
- tuspy with a wrong checksum gets 460;
- an https:// source on a local TLS server (a self-signed certificate the worker trusts through
  SSL_CERT_FILE) and an s3:// source (moto's server as the S3 endpoint) transcode; a 404 fails the
  job at once, without retries.

The worker may reach the loopback TLS origin only because this test sets
JETENCODE_FETCH_ALLOW_PRIVATE for it; the guard with that setting off is tests/media/test_fetch.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import socket
import threading
import uuid

import boto3
import pytest
import requests
from tusclient import client as tus_client
from tusclient.exceptions import TusCommunicationError, TusUploadFailed
from tusclient.uploader import Uploader

from media.models import MediaAsset
from media.submission import create_job
from scheduler.models import Job
from tests.kit.db import job_status, one
from tests.kit.origin import Origin, TlsFiles
from tests.kit.tcpproxy import _reset
from tests.kit.waiting import wait_for
from tests.kit.web import issue_token

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

FAST_TRANSCODE = {
    "ladder": [{"height": 144}],
    "segment_seconds": 1,
    "thumbnail_width": 160,
    "quality_metrics": [],
    "preset": "ultrafast",
}
TERMINAL = ("completed", "failed", "cancelled")


class Sha256Uploader(Uploader):
    """tuspy's uploader with the tus checksum in sha256 (tuspy's default is sha1)."""

    CHECKSUM_ALGORITHM_PAIR = ("sha256", hashlib.sha256)


class DroppingLink:
    """A TCP relay to `target` that drops one connection, after `cut_after` bytes have gone from
    clients to the server (tuspy opens a connection per request, so this cuts one PATCH midway)."""

    def __init__(self, target: tuple[str, int], cut_after: int):
        self.target, self.cut_after = target, cut_after
        self.sent = 0
        self.cut_done = False
        self.requests: list[bytes] = []  # the first bytes of each client request (method and headers)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, dest: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client:
                    if data[:6] in (b"PATCH ", b"HEAD /", b"POST /"):
                        self.requests.append(data[:2048])
                    self.sent += len(data)
                    if not self.cut_done and self.sent > self.cut_after:
                        self.cut_done = True
                        # The server gets half of this piece and then the end of the stream (a
                        # reset would let its kernel drop bytes it had not read yet); the client
                        # gets a reset: its request failed midway.
                        dest.sendall(data[: len(data) // 2])
                        dest.shutdown(socket.SHUT_WR)
                        _reset(source)
                        return
                dest.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, dest):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def wait_terminal(job_id, worker, timeout=150) -> str:
    return wait_for(
        lambda: job_status(job_id) in TERMINAL and job_status(job_id),
        timeout,
        f"job {job_id} to end",
        workers=[worker],
    )


@pytest.fixture
def operator_token(bob):
    return issue_token(bob, "operate")


def test_tuspy_resumes_after_a_dropped_connection_and_the_upload_transcodes(
    live_server, start_worker, roots, clips, operator_token
):
    data = clips.landscape.read_bytes()
    chunk = len(data) // 4 + 1
    host, port = live_server.url.removeprefix("http://").split(":")
    link = DroppingLink((host, int(port)), cut_after=len(data) // 2)
    try:
        client = tus_client.TusClient(
            f"http://127.0.0.1:{link.port}/v2/uploads/", headers={"Authorization": f"Bearer {operator_token}"}
        )
        uploader = client.uploader(
            file_stream=open(clips.landscape, "rb"),  # noqa: SIM115 - tuspy reads it as it goes
            chunk_size=chunk,
            metadata={"filename": "landscape.mp4"},
            retries=3,
            retry_delay=1,
            store_url=False,
        )
        uploader.upload()
    finally:
        link.close()
    assert link.cut_done, "the link never dropped a connection"
    offsets = [int(m[1]) for r in link.requests if (m := re.search(rb"(?i)\r\nupload-offset: *(\d+)", r))]
    # Four chunks, one PATCH cut midway: the server kept the bytes that arrived, the client asked
    # (HEAD) and went on from there, a mid-chunk offset, so five PATCHes in all.
    assert len(offsets) == 5 and offsets[:2] == [0, chunk], offsets
    assert chunk < offsets[2] < 2 * chunk, f"no resume from a mid-chunk offset: {offsets}"
    assert offsets[3] - offsets[2] == offsets[4] - offsets[3] == chunk, offsets
    assert any(r.startswith(b"HEAD ") for r in link.requests)

    status = requests.get(
        uploader.url, headers={"Authorization": f"Bearer {operator_token}"}, timeout=10
    ).json()
    assert status["complete"] and status["size"] == len(data)
    assert status["sha256"] == hashlib.sha256(data).hexdigest()
    assert (roots.media / status["path"]).read_bytes() == data
    assert MediaAsset.objects.get(pk=status["video_id"]).valid

    worker = start_worker("e2e-uploads")
    job = create_job(
        None, {"type": "transcode", "params": {"video_id": status["video_id"], **FAST_TRANSCODE}}
    )
    assert wait_terminal(job.id, worker) == "completed", Job.objects.get(pk=job.id).last_error
    assert (roots.outputs / str(job.id) / "renditions" / "144p.mp4").is_file()


def test_tuspy_with_a_wrong_checksum_gets_460_and_nothing_is_kept(live_server, roots, operator_token):
    class LyingUploader(Sha256Uploader):
        CHECKSUM_ALGORITHM_PAIR = ("sha256", lambda data: hashlib.sha256(data + b"!"))

    client = tus_client.TusClient(
        f"{live_server.url}/v2/uploads/", headers={"Authorization": f"Bearer {operator_token}"}
    )
    content = b"x" * 5000
    uploader = LyingUploader(
        client=client, file_stream=io.BytesIO(content), upload_checksum=True, store_url=False
    )
    with pytest.raises((TusUploadFailed, TusCommunicationError)) as failed:
        uploader.upload()
    assert failed.value.status_code == 460
    assert uploader.get_offset() == 0
    assert one("SELECT count(*) FROM media_assets") == 0


@pytest.fixture
def s3_source():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_https_and_s3_sources_transcode_and_a_404_fails_at_once(
    start_worker, roots, clips, tmp_path, settings, s3_source, monkeypatch
):
    tls = TlsFiles.make(tmp_path / "tls")
    aws = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    for name, value in aws.items():
        monkeypatch.setenv(name, value)
    bucket = f"src-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", endpoint_url=s3_source)
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="in/portrait.mp4", Body=clips.portrait.read_bytes())
    # This process submits (the https host must pass the guard here too: it is on loopback).
    settings.SOURCES = {**settings.SOURCES, "FETCH_ALLOW_PRIVATE": True}
    settings.S3_ENDPOINT_URL = s3_source
    with Origin({"/media/landscape.mp4": clips.landscape.read_bytes()}, tls=tls) as origin:
        worker = start_worker(
            "e2e-fetch",
            "--concurrency",
            "2",
            env={
                **aws,
                "SSL_CERT_FILE": str(tls.cert),
                "JETENCODE_FETCH_ALLOW_PRIVATE": "true",
                "JETENCODE_S3_ENDPOINT_URL": s3_source,
            },
        )
        https_job = create_job(
            None,
            {
                "type": "transcode",
                "params": {"input_url": origin.url("/media/landscape.mp4"), **FAST_TRANSCODE},
            },
        )
        s3_job = create_job(
            None,
            {
                "type": "transcode",
                "params": {"input_url": f"s3://{bucket}/in/portrait.mp4", **FAST_TRANSCODE},
            },
        )
        missing = create_job(
            None, {"type": "thumbnail_generate", "params": {"input_url": origin.url("/media/missing.mp4")}}
        )
        # A multi-input type reads URLs too: a quad of two https and two s3 sources (each fetched
        # once into the cache; the repeats reuse it).
        urls = [origin.url("/media/landscape.mp4"), f"s3://{bucket}/in/portrait.mp4"] * 2
        quad = create_job(
            None,
            {
                "type": "compile_quad",
                "params": {"input_urls": urls, "preset": "ultrafast", "cell_width": 160, "cell_height": 90},
            },
        )
        for job in (https_job, s3_job, missing, quad):
            wait_terminal(job.id, worker)
        assert [r["path"] for r in origin.requests].count("/media/missing.mp4") == 1  # no retry storm
    for job in (https_job, s3_job):
        assert job_status(job.id) == "completed", Job.objects.get(pk=job.id).last_error
        assert (roots.outputs / str(job.id) / "renditions" / "144p.mp4").is_file()
    assert job_status(quad.id) == "completed", Job.objects.get(pk=quad.id).last_error
    manifest = json.loads((roots.outputs / str(quad.id) / "sources.json").read_text())
    assert [source["path"].startswith(".cache/sources/") for source in manifest["sources"]] == [True] * 4
    assert len({source["path"] for source in manifest["sources"]}) == 2
    assert (roots.outputs / str(quad.id) / "quad.mp4").is_file()
    failed = Job.objects.get(pk=missing.id)
    assert failed.status == "failed" and "HTTP 404 Not Found" in failed.last_error
    assert one("SELECT max(attempt) FROM queue_tasks WHERE job_id = %s", [missing.id]) == 1
    progress = one(
        "SELECT count(*) FROM queue_task_logs l JOIN queue_tasks t ON t.id = l.task_id"
        " WHERE t.job_id = %s AND l.message LIKE '%%downloading https://localhost:%%'",
        [https_job.id],
    )
    assert progress == 1, one(
        "SELECT array_agg(l.message) FROM queue_task_logs l JOIN queue_tasks t ON t.id = l.task_id WHERE t.job_id = %s",
        [https_job.id],
    )
    cached = list((roots.media / ".cache" / "sources" / "objects").iterdir())
    assert sorted(
        p.read_bytes() == clips.landscape.read_bytes() or p.read_bytes() == clips.portrait.read_bytes()
        for p in cached
    ) == [True, True]
