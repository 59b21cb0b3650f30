"""Migrations are reproducible: an empty database migrated one step at a time ends with exactly the
functions the current SQL files (scheduler/sql/functions/) define.

Each migration that installs functions runs its own file (scheduler/sql/migrations/: 0002 whole, each
later one a delta of what changed), so an edit to a current file changes nothing in a migrated
database until a new migration ships it. These tests fail until it does: write the delta with
`python -m scheduler.sqlfiles delta NNNN_name` and a migration that runs it (see
scheduler/migrations/0016_sample_once_a_minute.py).
"""

import ast
import difflib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from scheduler import sqldelta, sqlfiles

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]

# Applies every migration of every app one at a time, in plan order (each step sees the schema
# exactly as the migrations before it left it), and prints how many it applied.
STEP_BY_STEP = """
import django
django.setup()
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
executor = MigrationExecutor(connection)
plan = executor.migration_plan(executor.loader.graph.leaf_nodes(), clean_start=True)
for migration, _ in plan:
    MigrationExecutor(connection).migrate([(migration.app_label, migration.name)])
print(len(plan))
"""

FUNCTIONS = """
SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public'
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
 ORDER BY 1
"""


@pytest.fixture
def empty_database(database_url):
    """A database of its own on the test server, dropped afterwards: (conninfo, DATABASE_URL)."""
    name = f"{connection.settings_dict['NAME']}_steps_{uuid.uuid4().hex[:6]}"
    settings = connection.settings_dict

    def conninfo(dbname):
        return psycopg.conninfo.make_conninfo(
            dbname=dbname,
            host=settings["HOST"] or None,
            port=settings["PORT"] or None,
            user=settings["USER"] or None,
            password=settings["PASSWORD"] or None,
        )

    with psycopg.connect(conninfo(settings["NAME"]), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield conninfo(name), database_url.replace(f"/{settings['NAME']}", f"/{name}", 1)
    finally:
        with psycopg.connect(conninfo(settings["NAME"]), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_step_by_step(url: str) -> int:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "jetencode.settings"}
    done = subprocess.run(
        [sys.executable, "-c", STEP_BY_STEP], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return int(done.stdout.split()[-1])


def functions(conn) -> dict[str, str]:
    return dict(conn.execute(FUNCTIONS).fetchall())


def current_sql_functions(conn) -> dict[str, str]:
    """The functions the current files define, on the migrated schema: every function dropped, the
    files run in order, the result read, all rolled back."""
    with conn.transaction(force_rollback=True):
        for signature in functions(conn):
            conn.execute(f"DROP FUNCTION {signature}")
        for path in sqlfiles.function_files():
            conn.execute(path.read_text())
        return functions(conn)


def explain(migrated: dict[str, str], current: dict[str, str]) -> str:
    lines = []
    for name in sorted(current.keys() - migrated.keys()):
        lines.append(f"defined in scheduler/sql/functions/ but installed by no migration: {name}")
    for name in sorted(migrated.keys() - current.keys()):
        lines.append(f"installed by the migrations but in no current file: {name}")
    for name in sorted(migrated.keys() & current.keys()):
        if migrated[name] != current[name]:
            diff = difflib.unified_diff(
                migrated[name].splitlines(), current[name].splitlines(), "migrated", "current", lineterm=""
            )
            lines.append(f"{name} differs:\n" + "\n".join(diff))
    return (
        "The migrations do not install the current SQL. Ship the change in a new migration: "
        "`python -m scheduler.sqlfiles delta NNNN_name` and a migration running it.\n" + "\n".join(lines)
    )


def test_migrating_step_by_step_installs_exactly_the_current_functions(empty_database):
    conninfo, url = empty_database
    assert migrate_step_by_step(url) > 0
    with psycopg.connect(conninfo, autocommit=True) as conn:
        migrated = functions(conn)
        current = current_sql_functions(conn)
        assert functions(conn) == migrated  # rolled back
    assert migrated == current, explain(migrated, current)


def test_the_migration_files_ship_every_current_statement():
    """The same check as above, in text and without a database: replaying the migration files
    leaves nothing of the current function files uninstalled, and installs nothing they dropped."""
    changed, removed = sqlfiles.pending_delta()
    assert not changed, "not shipped by any migration yet: " + ", ".join(s.key for s in changed)
    assert not removed, f"installed by the migrations but in no current file: {removed}"


def test_every_migration_file_is_run_by_its_migration():
    migrations_dir = ROOT / "scheduler" / "migrations"
    for sql_file in sqlfiles.migration_files():
        migration = migrations_dir / f"{sql_file.stem}.py"
        assert migration.exists(), f"{sql_file.name} has no migration {migration.name}"
        assert f'run_sql_file("{sql_file.name}")' in migration.read_text(), migration.name


def test_later_migration_files_are_deltas():
    """Only 0002 holds the functions whole; a later file holds what changed (a few statements),
    never a copy of every file again."""
    whole = len([s for s in sqlfiles.current_statements() if s.is_function])
    for sql_file in sqlfiles.migration_files()[1:]:
        functions = [s for s in sqldelta.statements(sql_file.read_text()) if s.is_function]
        assert len(functions) < whole * 0.5, (
            f"{sql_file.name} installs {len(functions)} of {whole}: a snapshot?"
        )


def test_no_migration_reads_the_current_sql():
    """What a migration installs must not change when the current files do: migrations run their
    own files (run_sql_file), never scheduler/sql/functions/ or the loader of sqlfiles."""
    for migration in sorted((ROOT / "scheduler" / "migrations").glob("*.py")):
        tree = ast.parse(migration.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and ast.get_docstring(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [getattr(node, "module", None) or ""] + [alias.name for alias in node.names]
                assert not any("sqlfiles" in name for name in names), migration.name
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                value = node.value
                current = value in ("functions", "functions_v1.sql") or value.startswith("functions/")
                assert not current and "sql/functions" not in value, f"{migration.name}: {value!r}"
