"""Hostile input gets a clear 4xx that names what was wrong, and changes nothing.

Every case asserts the status, the JSON error shape (422: `errors` naming the field) and that no row
was written to jobs or queue_tasks.
"""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from media import jobtypes
from media.jobtypes import JOB_TYPES
from tests.kit.matrix import counts

pytestmark = pytest.mark.django_db

JSON_ENDPOINTS = [  # (method, path template, a valid body)
    ("post", "/v2/jobs", {"type": "noop", "params": {}}),
    ("patch", "/v2/queue/{job}/priority", {"priority": 5}),
    ("post", "/v2/queue/{job}/move", {"direction": "up"}),
]


@pytest.fixture
def job(enqueue):
    return enqueue("noop", {})


def _assert_refused(response, *, status=None, field=None):
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    if status is not None:
        assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert isinstance(body.get("detail"), str) and body["detail"], body
    if response.status_code == 422:
        assert body["errors"] and all(e["field"] and e["message"] for e in body["errors"]), body
    if field is not None:
        fields = [e["field"] for e in body.get("errors", [])]
        assert any(f == field or f.startswith(field + ".") or f.startswith(field + "[") for f in fields), (
            field,
            body,
        )
        assert field.split(".")[-1] in body["detail"] or field in body["detail"], body["detail"]
    return body


# ---- malformed and oversized bodies -----------------------------------------------------------------

MALFORMED = [
    b"{",
    b"not json at all",
    b"[1, 2, 3]",
    b'"a string"',
    b"null",
    b"\xff\xfe\x00\x01binary\x00",
    b'{"type": "noop", "params": {"seconds": NaN}}',
    b'{"type": "noop", "params": {"seconds": Infinity}}',
    b"[" * 50_000 + b"]" * 50_000,
    b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
    '{"type": "noop", "webhook_url": "https://example.com/\ud800"}'.encode("utf-8", "surrogatepass"),
]


@pytest.mark.parametrize(("method", "path", "valid"), JSON_ENDPOINTS)
def test_malformed_json_is_a_4xx_and_changes_nothing(operator_api, job, method, path, valid):
    before = counts()
    url = path.format(job=job)
    for raw in MALFORMED:
        response = operator_api.request(method, url, raw=raw)
        _assert_refused(response)
        assert counts() == before, raw[:40]
    # The same endpoint with a sane body works (the refusals were about the body).
    assert operator_api.request(method, url, valid).status_code in (200, 201)


@pytest.mark.parametrize(("method", "path", "valid"), JSON_ENDPOINTS)
def test_oversized_bodies_are_413(operator_api, job, settings, method, path, valid):
    before = counts()
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = {**valid, "padding": "x" * (limit + 1024)}
    response = operator_api.request(method, path.format(job=job), body)
    _assert_refused(response, status=413)
    assert str(limit) in response.json()["detail"]
    assert counts() == before


def test_wrong_content_types_change_nothing(operator_api):
    before = counts()
    for content_type, raw in [
        ("text/plain", b'{"type": "noop"}'),
        ("application/x-www-form-urlencoded", b"type=noop"),
        (
            "multipart/form-data; boundary=xx",
            b"--xx\r\nContent-Disposition: form-data; name=type\r\n\r\nnoop\r\n--xx--",
        ),
        ("application/octet-stream", bytes(range(256))),
    ]:
        response = operator_api.request("post", "/v2/jobs", raw=raw, content_type=content_type)
        assert response.status_code < 500, (content_type, response.status_code)
        if response.status_code >= 400:
            _assert_refused(response)
    # Whatever the content type, a job may only come from a body that validates.
    assert counts()[0] - before[0] <= 1


# ---- huge or binary values ---------------------------------------------------------------------------

HUGE_OR_BINARY = [
    ({"type": "noop", "priority": 2**63}, "priority"),
    ({"type": "noop", "priority": 10**100}, "priority"),
    ({"type": "noop", "priority": -1001}, "priority"),
    ({"type": "noop", "priority": 1.5}, "priority"),
    ({"type": "noop", "priority": True}, "priority"),
    ({"type": "noop", "max_attempts": 0}, "max_attempts"),
    ({"type": "noop", "max_attempts": 21}, "max_attempts"),
    ({"type": "noop", "max_attempts": 2**31}, "max_attempts"),
    ({"type": "noop", "vram_mb": 2**40}, "vram_mb"),
    ({"type": "noop", "params": {"seconds": 1e308}}, "params.seconds"),
    ({"type": "noop", "params": {"seconds": -1}}, "params.seconds"),
    ({"type": "noop", "params": {"children": 10**30}}, "params.children"),
    ({"type": "noop", "params": {"children": 101}}, "params.children"),
    ({"type": "noop", "params": {"fail_attempts": -(2**63)}}, "params.fail_attempts"),
    ({"type": "noop", "params": {"nested": json.loads("[" * 40 + "]" * 40)}}, "params"),
    ({"type": "noop", "params": {"k\u0000": 1}}, "params"),
    ({"type": "noop", "params": {"x": "a\u0000b"}}, "params"),
    ({"type": "noop", "params": {f"k{i}": i for i in range(5000)}}, "params"),
    ({"type": "noop", "params": "not an object"}, "params"),
    ({"type": "noop", "params": [1, 2]}, "params"),
    ({"type": "noop", "required_worker_uid": "w\u0000"}, "required_worker_uid"),
    ({"type": "noop", "required_worker_uid": "w" * 5000}, "required_worker_uid"),
    ({"type": "noop", "webhook_url": "https://example.com/" + "a" * 5000}, "webhook_url"),
    ({"type": "noop", "hardware": "quantum"}, "hardware"),
    ({"type": "noop", "resource_category": "gpu_\u0000"}, "resource_category"),
    ({"type": "\u0000" * 10}, "type"),
    ({"type": "noop" * 10_000}, "type"),
    ({"type": "noop", "surprise": True}, "surprise"),
]


def _each(cases, check):
    """Run `check` on every case; report every case that failed, not just the first."""
    failures = []
    for case in cases:
        try:
            check(case)
        except AssertionError as exc:
            failures.append((str(case)[:80], str(exc)[:300]))
    assert failures == []


def test_huge_or_binary_values_are_422_naming_the_field(operator_api):
    before = counts()

    def check(case):
        body, field = case
        _assert_refused(operator_api.request("post", "/v2/jobs", body), status=422, field=field)
        assert counts() == before

    _each(HUGE_OR_BINARY, check)


BAD_QUERIES = [
    "/v2/jobs?page=0",
    "/v2/jobs?page=" + "9" * 40,
    "/v2/jobs?limit=501",
    "/v2/jobs?limit=-1",
    "/v2/jobs?type=" + "x" * 5000,
    "/v2/jobs?status=%00",
    "/v2/jobs?worker=a%00b",
    "/v2/queue?limit=100000",
    "/v2/jobs/not-a-uuid",
    "/v2/jobs/00000000-0000-0000-0000-000000000000%00",
    "/v2/queue/..%2F..%2Fetc",
    "/v2/workers/" + "w" * 5000,
    "/v2/workers/%00",
    "/v2/jobs/{job}/tasks?log_lines=100000",
]


def test_bad_query_and_path_parameters_are_4xx(operator_api, job):
    _each(BAD_QUERIES, lambda query: _assert_refused(operator_api.request("get", query.format(job=job))))


# ---- paths: traversal, option injection, protocols, symlink escapes ----------------------------------

BAD_PATHS = [
    "-i",
    "-filter_complex",
    "-y",
    "videos/-i",
    "../etc/passwd",
    "videos/../../etc/passwd",
    "./../outside/secret.mp4",
    "/etc/passwd",
    "~/clip.mp4",
    "file:/etc/passwd",
    "file:videos/clip.mp4",
    "concat:videos/clip.mp4|videos/clip.mp4",
    "http://169.254.169.254/latest/meta-data",
    "https://example.com/video.mp4",
    "subfile,,start,0,end,1,,:videos/clip.mp4",
    "data:video/mp4;base64,AAAA",
    "pipe:0",
    "videos\\..\\..\\etc\\passwd",
    "videos/clip.mp4\u0000.txt",
    "videos/clip.mp4\n-i",
    "",
    "x" * 5000,
]
SYMLINK_ESCAPES = ["videos/escape.mp4", "escape_dir/secret.mp4", "escape_dir", "etc_link/passwd", "etc_link"]
# compile_random.directory only filters library assets by their directory name: never opened as a path.
NOT_OPENED = {("compile_random", "directory")}


# input_url(s) are URLs, not paths: their refusals are test_source_urls_refuse_... below.
URL_FIELDS = {"input_url", "input_urls"}


def _path_fields():
    """(job type, field, is a list) for every string parameter of every job type but the URL ones:
    all are paths."""
    found = []
    for name, jt in sorted(JOB_TYPES.items()):
        for field, info in jt.params_model.model_fields.items():
            annotation = str(info.annotation)
            if "str" in annotation and field not in URL_FIELDS:
                found.append((name, field, "list[" in annotation))
    return found


PATH_FIELDS = _path_fields()


def _base_params(job_type: str, field: str) -> dict:
    """Valid params for the type that use `field` (so a refusal is about that field alone)."""
    fields = JOB_TYPES[job_type].params_model.model_fields
    params = {}
    if "inputs" in fields:
        params["inputs"] = ["videos/clip.mp4"] * 4
    elif "input" in fields:
        params["input"] = "videos/clip.mp4"
    if job_type == "move_to_library":
        params["target_directory"] = "inbox"
    if field not in params:
        params[field] = "videos"
    return params


def test_every_path_parameter_is_known():
    assert {(t, f) for t, f, _ in PATH_FIELDS} >= {
        ("transcode", "input"),
        ("scan", "directory"),
        ("compile_quad", "inputs"),
        ("move_to_library", "target_directory"),
        ("reencode_streaming", "library_directory"),
    }
    assert len(PATH_FIELDS) >= 18


@pytest.mark.parametrize(
    ("job_type", "field", "is_list"), PATH_FIELDS, ids=[f"{t}.{f}" for t, f, _ in PATH_FIELDS]
)
def test_path_parameters_refuse_traversal_injection_protocols_and_symlink_escapes(
    operator_api, hostile_media, job_type, field, is_list
):
    base = _base_params(job_type, field)
    jobtypes.validate_params(job_type, dict(base))  # the base is valid: refusals are about the field
    before = counts()
    bad_values = BAD_PATHS + ([] if (job_type, field) in NOT_OPENED else SYMLINK_ESCAPES)
    accepted = []
    for value in bad_values:
        params = {**base, field: ([value] + base[field][1:]) if is_list else value}
        response = operator_api.request("post", "/v2/jobs", {"type": job_type, "params": params})
        if response.status_code != 422:
            accepted.append((value[:40], response.status_code))
            continue
        # NUL is refused before the params are parsed, under the field "params" (see docs/reliability.md).
        _assert_refused(response, status=422, field="params" if "\x00" in value else f"params.{field}")
    assert accepted == []
    assert counts() == before


BAD_URLS = [
    "https://127.0.0.1/clip.mp4",
    "https://[::1]/clip.mp4",
    "https://[::ffff:127.0.0.1]/clip.mp4",
    "https://169.254.169.254/latest/meta-data",
    "https://10.0.0.5/clip.mp4",
    "https://localhost/clip.mp4",
    "http://93.184.215.14/clip.mp4",  # http:// is off by default
    "file:///etc/passwd",
    "ftp://93.184.215.14/clip.mp4",
    "concat:https://93.184.215.14/a.mp4|/etc/passwd",
    "https://user:secret@93.184.215.14/clip.mp4",
    "s3://../etc/passwd",
    "https://93.184.215.14/clip.mp4\n-i",
    "https://93.184.215.14/" + "x" * 5000,
    "",
]
URL_TYPES = sorted(name for name, jt in JOB_TYPES.items() if "input_url" in jt.params_model.model_fields)


@pytest.mark.parametrize("job_type", URL_TYPES)
def test_source_urls_refuse_private_addresses_other_schemes_and_credentials(
    operator_api, hostile_media, job_type
):
    """Each refused at submission, on params.input_url, without a network round trip (the guard's
    own tests, redirects and rebinding included, are tests/media/test_fetch.py)."""
    before = counts()
    accepted = []
    for value in BAD_URLS:
        params = {"input_url": value} if value else {"input_url": value, "input": "videos/clip.mp4"}
        if job_type == "move_to_library":
            params["target_directory"] = "inbox"
        response = operator_api.request("post", "/v2/jobs", {"type": job_type, "params": params})
        if response.status_code != 422:
            accepted.append((value[:40], response.status_code))
            continue
        _assert_refused(response, status=422, field="params.input_url")
        assert "secret" not in response.content.decode()
    assert accepted == []
    assert counts() == before


MULTI_URL_TYPES = sorted(
    name for name, jt in JOB_TYPES.items() if "input_urls" in jt.params_model.model_fields
)


@pytest.mark.parametrize("job_type", MULTI_URL_TYPES)
def test_each_of_input_urls_is_refused_like_input_url_naming_its_index(operator_api, hostile_media, job_type):
    good = ["s3://bucket/a.mp4", "s3://bucket/b.mp4", "s3://bucket/c.mp4", "s3://bucket/d.mp4"]
    before = counts()
    accepted = []
    for value in BAD_URLS:
        params = {"input_urls": [good[0], value, *good[2:]]}
        response = operator_api.request("post", "/v2/jobs", {"type": job_type, "params": params})
        if response.status_code != 422:
            accepted.append((value[:40], response.status_code))
            continue
        _assert_refused(response, status=422, field="params.input_urls")
        body = response.content.decode()
        assert ("input_urls[1]" in body or "params.input_urls.1" in body) and "secret" not in body, body
    assert accepted == []
    assert counts() == before


def test_the_dashboard_form_refuses_a_bad_path_and_writes_nothing(caller, hostile_media):
    operator = caller("operator", "session")
    before = counts()
    response = operator.client.post(
        reverse("dashboard:job_new") + "?type=thumbnail_generate",
        {
            "type": "thumbnail_generate",
            "input": "../outside/secret.mp4",
            "csrfmiddlewaretoken": operator.csrf_token(),
        },
    )
    assert response.status_code == 422
    assert "input" in response.content.decode()
    assert counts() == before


# ---- webhooks aimed at private addresses -----------------------------------------------------------

PRIVATE_WEBHOOKS = [
    "http://127.0.0.1/hook",
    "http://127.1.2.3:8080/hook",
    "http://localhost:8000/hook",
    "http://[::1]/hook",
    "http://0.0.0.0/hook",
    "http://10.0.0.1/hook",
    "http://172.16.5.4/hook",
    "http://192.168.1.1/hook",
    "http://100.64.0.1/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[fe80::1]/hook",
    "http://[fd00::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://2130706433/hook",
    "http://0x7f000001/hook",
    "http://017700000001/hook",
    "http://user:pass@example.com/hook",
    "file:///etc/passwd",
    "ftp://example.com/hook",
    "gopher://127.0.0.1:25/",
    "javascript:alert(1)",
    "http:///nohost",
    "http://exa mple.com/",
]


def test_webhook_urls_to_private_or_odd_targets_are_refused(operator_api):
    before = counts()

    def check(url):
        response = operator_api.request("post", "/v2/jobs", {"type": "noop", "webhook_url": url})
        body = _assert_refused(response, status=422, field="webhook_url")
        assert "webhook" in body["errors"][0]["message"].lower()
        assert counts() == before

    _each(PRIVATE_WEBHOOKS, check)


def test_the_dashboard_form_refuses_a_private_webhook(caller):
    operator = caller("operator", "session")
    before = counts()
    response = operator.client.post(
        reverse("dashboard:job_new") + "?type=noop",
        {
            "type": "noop",
            "webhook_url": "http://169.254.169.254/latest/meta-data/",
            "csrfmiddlewaretoken": operator.csrf_token(),
        },
    )
    assert response.status_code == 422
    assert "webhook" in response.content.decode().lower()
    assert counts() == before


def test_a_wrong_method_is_a_json_405_and_changes_nothing(operator_api, job):
    before = counts()
    for method, path in [
        ("put", "/v2/jobs"),
        ("delete", f"/v2/jobs/{job}"),
        ("patch", "/v2/jobs"),
        ("get", f"/v2/queue/{job}/cancel"),
    ]:
        response = operator_api.request(method, path, {"type": "noop"})
        _assert_refused(response, status=405)
        assert response["Allow"]
    assert counts() == before
