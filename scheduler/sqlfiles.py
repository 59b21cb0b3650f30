"""The scheduler's SQL files: named queries, the current functions, and what each migration installs.

scheduler/sql/
  repository.sql, queries.sql   named queries: each under a `-- name: <name>` header and a one-line
                                `-- description`, with named parameters (`%(task_id)s`)
  functions/NN_*.sql            the current functions, by concern in reading order
  migrations/NNNN_*.sql         what each migration installs, kept as it was (never edited): 0002
                                whole, each later one a delta (scheduler/sqldelta.py)

`python -m scheduler.sqlfiles delta 0017_some_change` writes the delta a new migration runs: the
statements of the current function files that replaying the migration files would not install
(scheduler/migrations/0016_sample_once_a_minute.py shows the migration around it).
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

from scheduler import sqldelta

SQL_DIR = Path(__file__).resolve().parent / "sql"
FUNCTIONS_DIR = SQL_DIR / "functions"
MIGRATIONS_DIR = SQL_DIR / "migrations"

_HEADER = re.compile(r"^-- name: *(\S+) *$", re.MULTILINE)


def parse_named_queries(text: str, source: str = "<sql>") -> dict[str, str]:
    """Split a named-query file into {name: sql}. The file's own header comes before the first
    `-- name:` line; each query's description (the comment lines right under its name) is required
    and left out of the SQL sent, and so is a trailing semicolon."""
    queries: dict[str, str] = {}
    pieces = _HEADER.split(text)
    for name, block in zip(pieces[1::2], pieces[2::2], strict=True):
        lines = block.strip("\n").split("\n")
        described = 0
        while described < len(lines) and lines[described].startswith("--"):
            described += 1
        body = "\n".join(lines[described:]).strip().rstrip(";").rstrip()
        if name in queries:
            raise ValueError(f"{source}: query {name!r} is named twice")
        if not described:
            raise ValueError(f"{source}: query {name!r} has no description line under its name")
        if not body:
            raise ValueError(f"{source}: query {name!r} is empty")
        queries[name] = body
    return queries


@cache
def named_queries(filename: str) -> dict[str, str]:
    """{name: sql} of scheduler/sql/<filename>, read once per process."""
    path = SQL_DIR / filename
    return parse_named_queries(path.read_text(), str(path.relative_to(SQL_DIR.parent.parent)))


def function_files() -> list[Path]:
    """The current function files, in reading (and installation) order."""
    return sorted(FUNCTIONS_DIR.glob("*.sql"))


def migration_files() -> list[Path]:
    """What the migrations run, in order (0002 whole, each later one a delta)."""
    return sorted(MIGRATIONS_DIR.glob("*.sql"))


def current_statements() -> list[sqldelta.Statement]:
    """Every statement of the current function files, in installation order."""
    return [statement for path in function_files() for statement in sqldelta.statements(path.read_text())]


def pending_delta() -> tuple[list[sqldelta.Statement], list[str]]:
    """(statements the migrations do not install yet, functions they install that no file defines)."""
    before = sqldelta.installed(migration_files())
    current = current_statements()
    return sqldelta.delta(current, before), sqldelta.removed(current, before)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "delta":
        print("usage: python -m scheduler.sqlfiles delta NNNN_migration_name", file=sys.stderr)
        return 2
    changed, removed = pending_delta()
    for name in removed:
        print(f"removed from the current files (write its DROP FUNCTION at the top by hand): {name}")
    if not changed:
        print("the migrations already install the current functions: no delta to write")
        return 1
    path = MIGRATIONS_DIR / f"{argv[1]}.sql"
    path.write_text(sqldelta.render(argv[1], changed))
    print(f"wrote {path.relative_to(SQL_DIR.parent.parent)}: {len(changed)} statement(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
