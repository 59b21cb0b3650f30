"""Property-based run over the OpenAPI document with every schemathesis check: no 5xx, every
response matches the schema (status code, content type, headers, body), every request the schema
calls valid is accepted and every one it calls invalid refused. The schema is loaded from the WSGI
app itself; requests carry an operate token of an Operators member; the run is derandomized so a
failure reproduces.

"Accepted" has one exception, `acceptance_of_valid_data` below: a 422 whose every error says that
a named file, asset or worker does not exist. Whether `videos/a.mp4` is under the media root is
state, not shape (as a 404 is for a path parameter); no schema can declare it.

Random UUIDs only ever reach the 404 branch of /v2/jobs/{id} and /v2/queue/{id}/..., so the path
parameters are also drawn from real jobs (pending, running, paused, failed, completed) and a real
worker: the controls then meet every state they can be applied in.
"""

import re
import uuid

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance

from scheduler import repository
from tests.kit.db import claim

KNOWN = {"job_id": [], "uid": []}
# A 422 that only says a named thing is not there (media.paths, the library, the worker registry,
# a webhook or source host that does not resolve to a public address): facts of the moment that no
# schema can declare.
MISSING = re.compile(
    r"does not exist|not found|no such|unknown|is not a (file|directory)|not in the library|does not resolve"
)


# A tus PATCH body (api.openapi_tus) is raw bytes: send what was generated as it is.
schemathesis.serializer.alias("application/offset+octet-stream", "application/octet-stream")


def _looks_like(name: str, value) -> bool:
    # A real job id only replaces a generated one of the same shape: a deliberately malformed id
    # (schemathesis' negative cases) must reach the server as it was made.
    if name != "job_id":
        return True
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


@schemathesis.hook
def flatmap_path_parameters(context, path_parameters):
    choices = [path_parameters]
    for name, values in KNOWN.items():
        if name in (path_parameters or {}) and _looks_like(name, path_parameters[name]):
            choices += [{**path_parameters, name: value} for value in values]
    return st.sampled_from(choices)


def acceptance_of_valid_data(ctx, response, case):
    """positive_data_acceptance, except for a 422 that names only missing files, assets or workers."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code == 422:
            errors = response.json().get("errors") or []
            if errors and all(MISSING.search(e.get("message", "")) for e in errors):
                return None
        raise


def auth_headers(case, token: str) -> dict[str, str]:
    # A negative case may carry a malformed Authorization header on purpose: send it as it is.
    if "Authorization" in (case.headers or {}):
        return {}
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def api_schema(db, bob, token_for, failed_job, completed_job, enqueue, worker):
    # Requests go through Django's WSGI handler, which closes "old" connections at each request's
    # start and end; inside the test transaction that would close the connection under the test.
    # (The test client disconnects these receivers the same way while it runs a request.)
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    running = enqueue()
    assert claim(worker) is not None
    paused = enqueue()
    repository.pause(paused)
    pending = [enqueue(priority=p) for p in (0, 0, 5)]
    KNOWN["job_id"] = [str(j) for j in (failed_job, completed_job, running, paused, *pending)]
    KNOWN["uid"] = [worker[0]]
    schema = schemathesis.openapi.from_wsgi("/v2/openapi.json", get_wsgi_application())
    schema.token = token_for(bob, "operate")
    yield schema
    KNOWN["job_id"], KNOWN["uid"] = [], []
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


lazy_schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.django_db
@lazy_schema.parametrize()
@settings(
    max_examples=25, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
def test_api_conforms_to_its_schema(case, api_schema):
    case.call_and_validate(
        headers=auth_headers(case, api_schema.token),
        excluded_checks=[positive_data_acceptance],
        additional_checks=[acceptance_of_valid_data],
    )
