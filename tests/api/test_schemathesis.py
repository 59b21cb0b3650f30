"""Property-based run over the OpenAPI document: no 5xx, and every response matches the schema
(status code, content type, body). Loaded from the WSGI app itself, authenticated with an operate
token of an Operators member, derandomized so a failure reproduces."""

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def api_schema(db, olivia, token_for, enqueue, make_worker_row):
    # Requests go through Django's WSGI handler, which closes "old" connections on each request;
    # inside the test transaction that would close the connection under the test. The test client
    # does the same as this while it runs a request.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    # Something to find: a worker and a few jobs.
    make_worker_row("w-schemathesis")
    for _ in range(3):
        enqueue()
    schema = schemathesis.openapi.from_wsgi("/v2/openapi.json", get_wsgi_application())
    schema.token = token_for(olivia, "operate")
    yield schema
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


lazy_schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.mark.django_db
@lazy_schema.parametrize()
@settings(max_examples=25, derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, api_schema):
    case.call_and_validate(headers={"Authorization": f"Bearer {api_schema.token}"}, checks=CHECKS)
