"""Inputs that used to crash a view into a 500 are a 4xx with a message.

Each was found by reading the code (a parser that raises something nobody catches): malformed
webhook URLs, names longer than the filesystem's NAME_MAX, huge numbers and deep nesting in the
form's JSON fields, NUL bytes in dashboard filters and paths, a superscript digit in the admin's
task search, a 5,000-digit byte range. A hypothesis test then throws arbitrary text at every
dashboard filter and form field.
"""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.kit.matrix import counts

pytestmark = pytest.mark.django_db

BAD_WEBHOOKS = [
    "http://[::1",
    "http://[zzz]/",
    "http://[::1]x/",
    "http://example.com\uff0fevil/",  # FULLWIDTH SOLIDUS: NFKC makes it '/', urlsplit raises
    "http://exa\uff03mple.com/",
    "http://example.com:99999/",
    "http://example.com:port/",
]
LONG_NAME = "é" * 200  # 200 characters, 400 bytes: over NAME_MAX (255 bytes)


def _json_422(response, field):
    assert response.status_code == 422, (response.status_code, response.content[:300])
    body = response.json()
    assert field in [e["field"] for e in body["errors"]], body
    assert field in body["detail"], body
    return body


@pytest.mark.parametrize("url", BAD_WEBHOOKS)
def test_a_malformed_webhook_url_is_422_on_the_api(operator_api, url):
    before = counts()
    response = operator_api.request("post", "/v2/jobs", {"type": "noop", "webhook_url": url})
    body = _json_422(response, "webhook_url")
    assert "webhook" in body["errors"][0]["message"].lower()
    assert counts() == before


@pytest.mark.parametrize("url", BAD_WEBHOOKS)
def test_a_malformed_webhook_url_is_422_on_the_dashboard_form(caller, url):
    operator = caller("operator", "session")
    before = counts()
    response = operator.client.post(
        reverse("dashboard:job_new") + "?type=noop",
        {"type": "noop", "webhook_url": url, "csrfmiddlewaretoken": operator.csrf_token()},
    )
    assert response.status_code == 422
    assert "webhook" in response.content.decode().lower()
    assert counts() == before


@pytest.mark.parametrize(
    ("job_type", "params", "field"),
    [
        ("thumbnail_generate", {"input": f"videos/{LONG_NAME}.mp4"}, "params.input"),
        ("thumbnail_generate", {"input": f"{LONG_NAME}/clip.mp4"}, "params.input"),
        ("scan", {"directory": LONG_NAME}, "params.directory"),
        (
            "move_to_library",
            {"input": "videos/clip.mp4", "target_directory": LONG_NAME},
            "params.target_directory",
        ),
        ("compile_quad", {"inputs": ["videos/clip.mp4"] * 3 + [LONG_NAME]}, "params.inputs"),
    ],
)
def test_a_name_over_name_max_bytes_is_422_naming_the_field(
    operator_api, hostile_media, job_type, params, field
):
    before = counts()
    response = operator_api.request("post", "/v2/jobs", {"type": job_type, "params": params})
    body = _json_422(response, field)
    assert "255 bytes" in " ".join(e["message"] for e in body["errors"]), body
    assert counts() == before


def test_a_long_output_name_on_the_dashboard_file_view_is_404(caller, hostile_media):
    viewer = caller("viewer", "session")
    url = reverse("dashboard:job_output", args=[uuid.uuid4(), LONG_NAME])
    assert viewer.client.get(url).status_code == 404


@pytest.fixture
def published(hostile_media, settings, enqueue):
    """An output file of a job, as the dashboard serves it."""
    job_id = enqueue("noop", {})
    directory = settings.OUTPUT_ROOT_DIR / str(job_id)
    directory.mkdir(parents=True)
    (directory / "clip.mp4").write_bytes(b"x" * 1000)
    return reverse("dashboard:job_output", args=[job_id, "clip.mp4"])


@pytest.mark.parametrize(
    "header",
    [
        "bytes=" + "9" * 5000 + "-",
        "bytes=0-" + "9" * 5000,
        "bytes=-" + "9" * 5000,
        "bytes=²-",
        "bytes=1" + "0" * 40 + "-",
    ],
    ids=["start", "end", "suffix", "superscript", "40-digits"],
)
def test_a_byte_range_with_a_huge_number_is_ignored_or_416_on_the_dashboard(caller, published, header):
    viewer = caller("viewer", "session")
    response = viewer.client.get(published, headers={"Range": header})
    assert response.status_code in (200, 206, 416), response.status_code
    if response.status_code == 206:
        assert response["Content-Range"].endswith("/1000")


@pytest.mark.parametrize(
    "raw",
    [
        "9" * 5000,
        "[" + "9" * 5000 + "]",
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 40_000 + "1" + "}" * 40_000,
    ],
    ids=["number", "number-in-list", "brackets", "objects"],
)
def test_the_forms_json_field_refuses_huge_numbers_and_deep_nesting(caller, raw):
    operator = caller("operator", "session")
    before = counts()
    response = operator.client.post(
        reverse("dashboard:job_new") + "?type=transcode",
        {
            "type": "transcode",
            "p.input": "videos/clip.mp4",
            "p.ladder": raw,
            "csrfmiddlewaretoken": operator.csrf_token(),
        },
    )
    assert response.status_code == 422, response.status_code
    assert "ladder" in response.content.decode()
    assert counts() == before


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/queue?worker=%00",
        "/dashboard/queue?state=%00",
        "/dashboard/jobs?worker=%00",
        "/dashboard/jobs?type=%00",
        "/dashboard/jobs?q=%00",
        "/dashboard/library?q=%00",
        "/dashboard/library?directory=%00",
        "/dashboard/workers/%00",
        "/dashboard/workers/a%00b",
    ],
)
def test_a_nul_byte_in_a_dashboard_filter_or_path_is_400(caller, path):
    viewer = caller("viewer", "session")
    response = viewer.client.get(path)
    assert response.status_code in (400, 404), (path, response.status_code)
    if response.status_code == 400:
        assert "NUL" in response.content.decode()


@pytest.mark.parametrize("term", ["²", "١٢٣", "9" * 40, "%00", "a\x00b", "-1"])
@pytest.mark.parametrize("model", ["queuetask", "tasklog", "job", "jobschedule", "fenceaudit"])
def test_admin_search_with_odd_digits_or_nul_is_not_a_500(admin_client, model, term):
    response = admin_client.get(f"/admin/scheduler/{model}/", {"q": term})
    assert response.status_code in (200, 302, 400), (model, term, response.status_code)


# ---- fuzz: every dashboard filter and form field, arbitrary text -----------------------------------

FILTER_PAGES = {
    "/dashboard/queue": ["worker", "state", "partial", "page"],
    "/dashboard/jobs": ["q", "status", "type", "worker", "ids", "page", "partial"],
    "/dashboard/library": ["q", "directory", "validity", "orientation", "page"],
    "/dashboard/workers": ["state", "partial"],
    "/dashboard/": ["partial", "range"],
    "/dashboard/jobs/new": ["type"],
}
TEXT = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40),
    st.sampled_from(
        ["\x00", "a\x00b", "²", "9" * 5000, "-" + "9" * 30, "[" * 5000, "{}", "1e999", "NaN", "../x"]
    ),
)


@pytest.fixture
def fuzz_client(db):
    """A logged-in operator (without CSRF checks: the fuzz is about parsing, not about CSRF).
    Hypothesis reruns the body in the same test, so every example shares this client."""
    from tests.kit.personas import in_role

    client = Client()
    client.force_login(in_role("operator"))
    return client


@hypothesis_settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(page=st.sampled_from(sorted(FILTER_PAGES)), data=st.data())
def test_fuzz_dashboard_filters_never_answer_500(fuzz_client, page, data):
    names = FILTER_PAGES[page]
    query = data.draw(st.dictionaries(st.sampled_from(names), TEXT, max_size=len(names)))
    response = fuzz_client.get(page, query)
    assert response.status_code < 500, (page, query, response.status_code)


FORM_TYPES = ["noop", "transcode", "compile_mega", "clip_generate", "digest_generate", "compile_gif"]


@hypothesis_settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(job_type=st.sampled_from(FORM_TYPES), data=st.data())
def test_fuzz_the_create_job_form_never_answers_500(fuzz_client, job_type, data):
    from dashboard.forms import schema_fields

    names = [f.input_name for f in schema_fields(job_type)]
    names += ["priority", "max_attempts", "hardware", "required_worker_uid", "resource_category", "vram_mb"]
    names += ["webhook_url"]
    form = data.draw(st.dictionaries(st.sampled_from(names), TEXT, max_size=6))
    response = fuzz_client.post(
        reverse("dashboard:job_new") + f"?type={job_type}", {"type": job_type, **form}
    )
    assert response.status_code < 500, (job_type, form, response.status_code)
