""".env.example lists every variable the code reads, and nothing it does not.

"Read" means named in the product's Python (jetencode, api, media, scheduler, workers, dashboard,
deploy, manage.py) as a string literal `"JETENCODE_…"` / `"GUNICORN_…"` (settings go through
jetencode.env's envstr/envint/…; workers/db.py and gunicorn.conf.py read os.environ with constants),
plus DATABASE_URL. `X_FILE` variants are the env helpers' generic secret-file form, not settings.
"""

from __future__ import annotations

import re

from tests.kit import ROOT

PRODUCT = ["jetencode", "api", "media", "scheduler", "workers", "dashboard", "deploy", "manage.py"]
LITERAL = re.compile(r"""["']((?:JETENCODE|GUNICORN)_[A-Z0-9_]+)["']""")
EXAMPLE_LINE = re.compile(r"^#?\s*([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def variables_read_by_the_code() -> set[str]:
    names = {"DATABASE_URL"}
    for entry in PRODUCT:
        path = ROOT / entry
        files = [path] if path.is_file() else path.rglob("*.py")
        for file in files:
            if "migrations" in file.parts:
                continue
            names |= set(LITERAL.findall(file.read_text()))
    return {name for name in names if not name.endswith("_FILE")}


def variables_in_env_example() -> set[str]:
    return set(EXAMPLE_LINE.findall((ROOT / ".env.example").read_text()))


def test_every_variable_the_code_reads_is_in_env_example():
    missing = variables_read_by_the_code() - variables_in_env_example()
    assert not missing, f"add to .env.example: {sorted(missing)}"


def test_env_example_names_nothing_the_code_does_not_read():
    stale = variables_in_env_example() - variables_read_by_the_code()
    assert not stale, f".env.example names variables nothing reads: {sorted(stale)}"


def test_the_scan_finds_settings_of_every_kind():
    # The scan itself: envint in settings, a module constant in workers/db.py, gunicorn's os.environ.
    found = variables_read_by_the_code()
    assert {"JETENCODE_CORS_ORIGINS", "JETENCODE_LISTEN_DATABASE_URL", "GUNICORN_KEEPALIVE"} <= found
