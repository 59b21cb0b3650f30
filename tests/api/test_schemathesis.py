"""Property-based run over the OpenAPI document: no 5xx, and every response matches the schema
(status code, content type, body). The schema is loaded from the WSGI app itself; requests carry an
operate token of an Operators member; the run is derandomized so a failure reproduces.

Random UUIDs only ever reach the 404 branch of /v2/jobs/{id} and /v2/queue/{id}/..., so the path
parameters are also drawn from real jobs (pending, running, paused, failed, completed) and a real
worker: the controls then meet every state they can be applied in.
"""

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from scheduler import repository
from tests.kit.db import claim

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
KNOWN = {"job_id": [], "uid": []}


@schemathesis.hook
def flatmap_path_parameters(context, path_parameters):
    choices = [path_parameters]
    for name, values in KNOWN.items():
        if name in (path_parameters or {}):
            choices += [{**path_parameters, name: value} for value in values]
    return st.sampled_from(choices)


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
    case.call_and_validate(headers={"Authorization": f"Bearer {api_schema.token}"}, checks=CHECKS)
