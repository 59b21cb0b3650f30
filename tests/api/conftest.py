"""API test fixtures: personas, tokens and a small JSON client.

Personas: alice is a superuser (admin); olivia is in Operators; victor is in Viewers; nora is a
plain user with no group (she can log in to nothing here).
"""

import json

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from api.models import ApiToken
from scheduler import repository


class Api:
    """A JSON client that sends `Authorization: Bearer <token>` (when it has one)."""

    def __init__(self, client: Client, token: str | None = None):
        self.client = client
        self.token = token

    def headers(self, extra=None):
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        headers.update(extra or {})
        return headers

    def get(self, path, params=None, headers=None):
        return self.client.get(path, params or {}, headers=self.headers(headers))

    def _send(self, method, path, body, raw, headers):
        data = raw if raw is not None else ("" if body is None else json.dumps(body))
        return getattr(self.client, method)(
            path, data, content_type="application/json", headers=self.headers(headers)
        )

    def post(self, path, body=None, raw=None, headers=None):
        return self._send("post", path, body, raw, headers)

    def patch(self, path, body=None, raw=None, headers=None):
        return self._send("patch", path, body, raw, headers)


def _user(username, group=None, superuser=False):
    # No password (an unusable one): hashing a real one costs most of a test's time; the session
    # tests use force_login.
    if superuser:
        return User.objects.create_superuser(username, f"{username}@example.com", None)
    user = User.objects.create_user(username, f"{username}@example.com", None)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def alice(db):
    return _user("alice", superuser=True)


@pytest.fixture
def olivia(db):
    return _user("olivia", "Operators")


@pytest.fixture
def victor(db):
    return _user("victor", "Viewers")


@pytest.fixture
def nora(db):
    return _user("nora")


@pytest.fixture
def token_for(db):
    def issue(user, scope="operate"):
        return ApiToken.issue(user, scope=scope, name="test")[1]

    return issue


@pytest.fixture
def anon():
    return Api(Client())


@pytest.fixture
def operator(olivia, token_for):
    """An operate-scope token of an Operators member: what an integrator normally uses."""
    return Api(Client(), token_for(olivia, "operate"))


@pytest.fixture
def viewer(victor, token_for):
    return Api(Client(), token_for(victor, "read"))


@pytest.fixture
def admin(alice, token_for):
    return Api(Client(), token_for(alice, "operate"))


@pytest.fixture
def worker(make_worker_row):
    """A live worker row (no process): (uid, session)."""
    return make_worker_row("w-api", concurrency=4)


@pytest.fixture
def claim():
    """Claim the next media task for a worker session: a lease to finish or fail it with."""

    def claim(uid, session, pool="media"):
        task = repository.claim(uid, session, pool, 30)
        assert task is not None, "nothing to claim"
        return repository.Lease.of(task, uid, session), task

    return claim


@pytest.fixture
def failed_job(enqueue, worker, claim):
    """A noop job whose only stage failed for good."""
    job_id = enqueue(max_attempts=1)
    lease, _ = claim(*worker)
    assert repository.fail(lease, "boom", retryable=False).outcome == "failed"
    return job_id


@pytest.fixture
def completed_job(enqueue, worker, claim):
    job_id = enqueue()
    lease, _ = claim(*worker)
    assert repository.finish(lease, result={"ok": True}).outcome == "completed"
    return job_id


@pytest.fixture
def bearer():
    """bearer(raw_token) → an Api client that sends it."""

    def make(raw, client=None):
        return Api(client or Client(), raw)

    return make
