"""The scheduler's SQL files: named queries, the current functions, and migration snapshots.

scheduler/sql/
  repository.sql, queries.sql   named queries: each under a `-- name: <name>` header and a one-line
                                `-- description`, with named parameters (`%(task_id)s`)
  functions/NN_*.sql            the current functions, by concern in reading order
  migrations/NNNN_*.sql         what each migration installs, kept as it was (never edited)

`python -m scheduler.sqlfiles snapshot 0009_some_change` writes the snapshot a new migration runs:
the current function files concatenated in order (scheduler/migrations/0008_sql_by_concern.py shows
the migration around it).
"""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

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


def current_functions_sql() -> str:
    """Every current function file, concatenated in order: what a new migration's snapshot holds."""
    return "\n".join(f"-- ==== {path.name} ====\n\n{path.read_text()}" for path in function_files())


def snapshot(migration: str) -> str:
    """The snapshot text for migration `migration` (e.g. '0009_some_change')."""
    return (
        f"-- Installed by migration {migration}: scheduler/sql/functions/*.sql concatenated in order, as\n"
        "-- they were when the migration was written. A snapshot: never edit it; a later change to the\n"
        "-- functions ships in a new migration with a snapshot of its own.\n\n" + current_functions_sql()
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "snapshot":
        print("usage: python -m scheduler.sqlfiles snapshot NNNN_migration_name", file=sys.stderr)
        return 2
    path = MIGRATIONS_DIR / f"{argv[1]}.sql"
    path.write_text(snapshot(argv[1]))
    print(f"wrote {path.relative_to(SQL_DIR.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
