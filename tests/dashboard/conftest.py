"""Personas for the dashboard tests.

- alice is a superuser: an admin, may do everything, including the Django admin;
- bob is in Operators: may look and act, but is not staff;
- charlie is in Viewers: may look, sees no controls, gets 403 when he posts anyway;
- dave has an account and no group: logged in, but may see nothing.
"""

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

PASSWORD = "correct horse battery staple"


@pytest.fixture
def alice(db):
    return User.objects.create_superuser("alice", "alice@example.com", PASSWORD)


@pytest.fixture
def bob(db):
    user = User.objects.create_user("bob", password=PASSWORD)
    user.groups.add(Group.objects.get(name="Operators"))
    return user


@pytest.fixture
def charlie(db):
    user = User.objects.create_user("charlie", password=PASSWORD)
    user.groups.add(Group.objects.get(name="Viewers"))
    return user


@pytest.fixture
def dave(db):
    return User.objects.create_user("dave", password=PASSWORD)


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def superuser_client(alice):
    return _client_for(alice)


@pytest.fixture
def operator_client(bob):
    return _client_for(bob)


@pytest.fixture
def viewer_client(charlie):
    return _client_for(charlie)


@pytest.fixture
def nogroup_client(dave):
    return _client_for(dave)


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """PBKDF2 at full strength costs a second per persona; these tests are not about hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
