"""Settings for the test suite (pyproject's DJANGO_SETTINGS_MODULE): the project's settings, a test
database of this process's own, and static files served without a collectstatic manifest.

pytest-django imports this module before any test runs, so it is also where the suite starts the
embedded PostgreSQL when DATABASE_URL is unset (as manage.py does for a command).
"""

import os
import secrets

from jetencode import embedded_db
from jetencode.env import envstr

embedded_db.start_if_used()

# A deployment (DATABASE_URL set, DEBUG off) refuses to start without a secret key: the suite has one
# of its own, which the workers and web servers it starts inherit.
os.environ.setdefault("JETENCODE_SECRET_KEY", "tests-" + secrets.token_urlsafe(40))

# Metric tests read /metrics right after changing the queue: no caching (tests/api/test_system.py
# turns it on where the cache itself is tested).
os.environ.setdefault("JETENCODE_METRICS_CACHE_SECONDS", "0")

from jetencode.settings import *  # noqa: E402, F403
from jetencode.settings import DATABASES, STORAGES  # noqa: E402

_db = DATABASES["default"]
# One test database per pytest process, so several runs on one server never collide.
_db["TEST"]["NAME"] = envstr("JETENCODE_TEST_DATABASE_NAME") or f"test_{_db['NAME']}_{os.getpid()}"
# The suite's own connections, told apart from the web servers and workers the tests start.
if not envstr("JETENCODE_APPLICATION_NAME"):
    _db["OPTIONS"]["application_name"] = "jetencode-tests"
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
# The suite's users are the cast of tests/kit/personas.py; PBKDF2 at full strength would cost a
# second per persona, and no test is about password hashing.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Django's test client calls itself "testserver"; the project's defaults no longer allow it.
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]  # noqa: F405
