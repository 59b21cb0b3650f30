"""API test fixtures: the cast's API clients, their tokens, and jobs in a known state.

The cast is tests/kit/personas.py (its fixtures are in tests/conftest.py); here each member gets
the client an integrator would use (tests/kit/web.py's `Api`, a bearer token):
- `admin_api`: alice (superuser) with an operate-scope token;
- `operator_api`: bob (Operators) with an operate-scope token, what an integrator normally uses;
- `viewer_api`: charlie (Viewers) with a read-scope token;
- `anonymous_api`: no token at all.
dave (no group) has no client of his own: the tests that need him issue his token with `token_for`.
"""

import pytest
from django.test import Client

from scheduler import repository
from tests.kit.db import claim, lease_of
from tests.kit.web import Api, issue_token


@pytest.fixture
def token_for(db):
    """token_for(user, scope="operate") -> a new raw API token of `user`."""
    return issue_token


@pytest.fixture
def bearer():
    """bearer(raw_token) → an Api client that sends it."""

    def make(raw, client=None):
        return Api(client or Client(), raw)

    return make


@pytest.fixture
def anonymous_api():
    return Api(Client())


@pytest.fixture
def operator_api(bob):
    return Api(Client(), issue_token(bob, "operate"))


@pytest.fixture
def viewer_api(charlie):
    return Api(Client(), issue_token(charlie, "read"))


@pytest.fixture
def admin_api(alice):
    return Api(Client(), issue_token(alice, "operate"))


@pytest.fixture
def failed_job(enqueue, worker):
    """A noop job whose only stage failed for good."""
    job_id = enqueue(max_attempts=1)
    assert repository.fail(lease_of(claim(worker), worker), "boom", retryable=False).outcome == "failed"
    return job_id


@pytest.fixture
def completed_job(enqueue, worker):
    job_id = enqueue()
    assert repository.finish(lease_of(claim(worker), worker), result={"ok": True}).outcome == "completed"
    return job_id
