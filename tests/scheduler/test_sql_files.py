"""The scheduler's SQL files: the named-query loader, the names the code uses, and the shape of the
current function files (scheduler/sql/functions/)."""

import ast
import re
from pathlib import Path

import pytest
from django.db import connection

from scheduler import sqlfiles

ROOT = Path(__file__).resolve().parents[2]

# The modules that run named queries, the file each reads, and the callables whose first argument
# (or, for QUERIES, whose subscript) is a query name.
USERS = {
    "scheduler/repository.py": ("repository.sql", {"_call", "_call_several", "_control", "QUERIES"}),
    "scheduler/queries.py": ("queries.sql", {"_rows"}),
}


def names_used(module: str, callables: set[str]) -> set[str]:
    """Query names in `module`: the first argument of a call to one of `callables` (a string
    literal, so this test can check it) and constant subscripts of one (QUERIES["enqueue_job"])."""
    used = set()
    for node in ast.walk(ast.parse((ROOT / module).read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in callables:
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                f"{module}:{node.lineno}: name the query with a string literal"
            )
            used.add(first.value)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in callables
        ):
            if isinstance(node.slice, ast.Constant):
                used.add(node.slice.value)
    return used


def test_the_loader_splits_on_names_and_leaves_out_descriptions():
    text = """-- The file's own header.

-- name: first
-- What the first one does.
-- (a second line of description)
SELECT 1
  -- a comment inside the query stays
  FROM t WHERE id = %(id)s;

-- name: second
-- What the second one does.
UPDATE t SET x = 1
"""
    assert sqlfiles.parse_named_queries(text) == {
        "first": "SELECT 1\n  -- a comment inside the query stays\n  FROM t WHERE id = %(id)s",
        "second": "UPDATE t SET x = 1",
    }


@pytest.mark.parametrize(
    "text, error",
    [
        ("-- name: a\n-- one\nSELECT 1\n-- name: a\n-- two\nSELECT 2\n", "named twice"),
        ("-- name: a\nSELECT 1\n", "no description"),
        ("-- name: a\n-- nothing below\n\n", "empty"),
    ],
)
def test_the_loader_refuses_duplicates_undescribed_and_empty_queries(text, error):
    with pytest.raises(ValueError, match=error):
        sqlfiles.parse_named_queries(text)


@pytest.mark.parametrize("module", sorted(USERS))
def test_every_name_the_code_uses_exists_and_every_named_query_is_used(module):
    filename, callables = USERS[module]
    defined = set(sqlfiles.named_queries(filename))
    used = names_used(module, callables)
    assert used - defined == set(), f"{module} runs queries that {filename} does not name"
    assert defined - used == set(), f"{filename} names queries that {module} never runs"


@pytest.mark.parametrize("filename", sorted({filename for filename, _ in USERS.values()}))
def test_named_queries_take_named_parameters(filename):
    for name, sql in sqlfiles.named_queries(filename).items():
        # Every % is a named parameter, or a literal %% (psycopg's escape).
        stray = re.sub(r"%\(\w+\)s|%%", "", sql)
        assert "%" not in stray, f"{filename}: {name} has a positional or stray % placeholder"


def statements(sql: str) -> list[str]:
    """The statements of a function file, without comments and function bodies."""
    sql = re.sub(r"\$\$.*?\$\$", "$$ $$", sql, flags=re.DOTALL)
    sql = re.sub(r"--[^\n]*", "", sql)
    return [s.strip() for s in sql.split(";") if s.strip()]


def test_function_files_open_with_their_purpose_and_hold_only_functions():
    files = sqlfiles.function_files()
    assert [f.name[:2] for f in files] == sorted(f.name[:2] for f in files) and len(files) >= 7
    for path in files:
        text = path.read_text()
        assert text.startswith("-- JetEncode scheduler, part "), f"{path.name} does not say what it is for"
        for statement in statements(text):
            assert re.match(r"CREATE OR REPLACE FUNCTION \w+\(", statement), (
                f"{path.name}: only CREATE OR REPLACE FUNCTION belongs here (schema lives in "
                f"migrations): {statement[:80]!r}"
            )


def test_every_function_has_a_header_saying_what_it_guarantees():
    for path in sqlfiles.function_files():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if line.startswith("CREATE OR REPLACE FUNCTION"):
                above = lines[number - 1] if number else ""
                assert above.startswith("-- ") and len(above) > 10, f"{path.name}:{number + 1} has no header"


def test_each_function_is_defined_once():
    seen: dict[str, str] = {}
    for path in sqlfiles.function_files():
        for name in re.findall(r"^CREATE OR REPLACE FUNCTION (\w+)\(", path.read_text(), flags=re.MULTILINE):
            assert name not in seen, f"{name} is defined in {seen[name]} and {path.name}"
            seen[name] = path.name


@pytest.mark.django_db
def test_the_folded_write_helpers_keep_the_hot_path_settings():
    # Called by the hot functions of the write path: PL/pgSQL (plans kept per session), planned
    # without sequential scans (docs/scheduler.md, "The write path's cost").
    helpers = ["begin_fenced_write_v1", "retry_or_fail_v1"]
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT p.proname, l.lanname, p.proconfig FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
                WHERE p.proname = ANY (%s) ORDER BY 1""",
            [helpers],
        )
        rows = cursor.fetchall()
    assert [row[0] for row in rows] == helpers
    for name, language, config in rows:
        assert language == "plpgsql" and "enable_seqscan=off" in (config or []), name
