"""Traversal and injection attempts are refused at submission by `create_job` (the path the API and
the dashboard share), with an error on the offending field and nothing enqueued. A few
representative cases; tests/security covers the rest, tests/media the worker's own re-check."""

from __future__ import annotations

import os

import pytest
from django.test import override_settings

from media.submission import ValidationError, create_job
from scheduler.models import Job
from tests.kit.db import one

# No worker here: nothing needs committed data, so each test rolls back instead of flushing.
pytestmark = pytest.mark.django_db

OK = "src/ok.mp4"

CASES = [
    # (job type, params, field, words the message must contain)
    ("transcode", {"input": "../outside.mp4"}, "params.input", "'..'"),
    ("transcode", {"input": "src/../../outside.mp4"}, "params.input", "'..'"),
    ("thumbnail_generate", {"input": "/etc/passwd"}, "params.input", "not absolute"),
    ("reencode_streaming", {"input": "escape.mp4"}, "params.input", "outside the media root"),
    ("validate", {"input": "concat:src/ok.mp4|/etc/passwd"}, "params.input", "FFmpeg protocol"),
    ("compile_gif", {"input": "subfile,,start,0,end,9,,:/etc/passwd"}, "params.input", "FFmpeg protocol"),
    ("tag_generation", {"input": "http://169.254.169.254/latest/meta-data"}, "params.input", "URL"),
    ("scene_extract", {"input": "src/-filter_complex"}, "params.input", "read as an option"),
    ("compile_quad", {"inputs": [OK, OK, "../x.mp4", OK]}, "params.inputs", "'..'"),
    ("scan", {"directory": "linked"}, "params.directory", "outside the media root"),
    ("move_to_library", {"input": OK, "target_directory": "/tmp"}, "params.target_directory", "not absolute"),
    ("reencode_streaming", {"input": OK, "library_directory": "../lib"}, "params.library_directory", "'..'"),
    # Filter-graph injection: enumerated values only, never free text in a filter graph.
    ("compile_gif", {"input": OK, "dither": "none[x];movie=/etc/passwd"}, "params.dither", ""),
    ("compile_quad", {"inputs": [OK] * 4, "audio": "mix;amovie=/etc/passwd"}, "params.audio", ""),
]


@pytest.fixture
def media(roots, clips, tmp_path):
    roots.add(clips.landscape, OK)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.mp4").write_bytes(clips.landscape.read_bytes())
    os.symlink(outside / "secret.mp4", roots.media / "escape.mp4")
    os.symlink(outside, roots.media / "linked")
    return roots


@pytest.mark.parametrize(
    ("job_type", "params", "field", "words"), CASES, ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(CASES)]
)
def test_submission_refuses_the_attempt_naming_its_field(media, job_type, params, field, words):
    with pytest.raises(ValidationError) as refused:
        create_job(None, {"type": job_type, "params": params})
    matching = [e for e in refused.value.errors if e["field"].startswith(field)]
    assert matching, refused.value.errors
    assert any(words in e["message"] for e in matching), refused.value.errors
    assert Job.objects.count() == 0 and one("SELECT count(*) FROM queue_tasks") == 0


def test_the_same_inputs_done_right_are_accepted(media):
    job = create_job(None, {"type": "compile_gif", "params": {"input": OK, "dither": "bayer"}})
    assert job.params["input"] == OK and job.status == "pending"


def test_a_webhook_to_a_private_address_is_refused_unless_allowed(media, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": False}
    for url in ("http://127.0.0.1:9/hook", "http://169.254.169.254/latest", "file:///etc/passwd"):
        with pytest.raises(ValidationError) as refused:
            create_job(None, {"type": "thumbnail_generate", "params": {"input": OK}, "webhook_url": url})
        assert [e["field"] for e in refused.value.errors] == ["webhook_url"], refused.value.errors
    with override_settings(JETENCODE={**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}):
        create_job(
            None,
            {"type": "thumbnail_generate", "params": {"input": OK}, "webhook_url": "http://127.0.0.1:9/hook"},
        )
    assert Job.objects.count() == 1
