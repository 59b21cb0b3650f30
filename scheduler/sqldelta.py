"""Delta migrations: each migration installs only the SQL functions that changed since the one before.

The current functions live in scheduler/sql/functions/ (whole, commented, in reading order). A
migration that changes them runs scheduler/sql/migrations/NNNN_name.sql, which holds just the
statements that differ from what the earlier migrations installed, each under the comment that
stands above it in its current file. Replaying the migration files in order therefore installs
exactly the current functions (tests/scheduler/test_migrations.py checks it on a real database),
and a change to one function costs its own lines, not a copy of every file.

    python -m scheduler.sqlfiles delta 0017_some_change    writes the delta of the current files

What counts as "the same" is the statement's text from `CREATE` to its `;` (whitespace at line ends
ignored): PostgreSQL keeps a function's body verbatim, comments included, so any other change is a
change to what gets installed. Other statements (ALTER TABLE, DROP FUNCTION, CREATE SEQUENCE) are
carried as written the first time they appear. A function removed from the current files is not
dropped for you: the tool names it, and its DROP FUNCTION goes at the top of the delta by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_FUNCTION = re.compile(r"CREATE\s+OR\s+REPLACE\s+FUNCTION\s+([\w.]+)\s*\(", re.IGNORECASE)
_DROP = re.compile(r"DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?([\w.]+)\s*\(", re.IGNORECASE)
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_]\w*)?\$")


@dataclass(frozen=True)
class Statement:
    comment: str  # the comment lines right above it (kept for the reader of a delta)
    sql: str  # from its first keyword to its semicolon

    @property
    def key(self) -> str:
        """A function's name and argument list as written (its identity); the text for others."""
        match = _FUNCTION.match(self.sql)
        if not match:
            return _normalized(self.sql)
        start = match.end()
        depth, end = 1, start
        while depth:
            depth += {"(": 1, ")": -1}.get(self.sql[end], 0)
            end += 1
        return f"{match.group(1)}({' '.join(self.sql[start : end - 1].split())})"

    @property
    def is_function(self) -> bool:
        return bool(_FUNCTION.match(self.sql))

    def text(self) -> str:
        return f"{self.comment}\n{self.sql}" if self.comment else self.sql


def _normalized(sql: str) -> str:
    return "\n".join(line.rstrip() for line in sql.strip().splitlines())


def _statement_end(text: str, i: int) -> int:
    """The index just past the `;` that ends the statement starting at i (quotes, dollar quotes and
    comments skipped)."""
    while i < len(text):
        if text.startswith("--", i):
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
        elif text[i] == "'":
            i = text.index("'", i + 1) + 1
            while text.startswith("'", i):  # a doubled quote inside a string
                i = text.index("'", i + 1) + 1
            continue
        elif tag := _DOLLAR_TAG.match(text, i):
            i = text.index(tag.group(), tag.end()) + len(tag.group())
            continue
        elif text[i] == ";":
            return i + 1
        i += 1
    return len(text)


def statements(text: str) -> list[Statement]:
    """The statements of a SQL file, each with the comment block right above it."""
    found: list[Statement] = []
    comment: list[str] = []
    i = 0
    while i < len(text):
        line_end = text.find("\n", i)
        line_end = len(text) if line_end < 0 else line_end
        line = text[i:line_end].strip()
        if not line:
            comment = []
            i = line_end + 1
        elif line.startswith("--"):
            comment.append(line)
            i = line_end + 1
        else:
            end = _statement_end(text, i)
            found.append(Statement("\n".join(comment), _normalized(text[i:end])))
            comment = []
            i = end
    return found


def installed(migration_files: list[Path]) -> tuple[dict[str, Statement], set[str]]:
    """What replaying these files installs: {function key: statement}, and every other statement's
    text seen (so a delta carries an ALTER or DROP only the first time)."""
    functions: dict[str, Statement] = {}
    others: set[str] = set()
    for path in migration_files:
        for statement in statements(path.read_text()):
            if statement.is_function:
                functions[statement.key] = statement
                continue
            others.add(statement.key)
            if dropped := _DROP.match(statement.sql):  # every overload of the name, to be safe
                for key in [key for key in functions if key.split("(")[0] == dropped.group(1)]:
                    del functions[key]
    return functions, others


def delta(current: list[Statement], before: tuple[dict[str, Statement], set[str]]) -> list[Statement]:
    """The statements of `current` that replaying `before` would not leave installed, in order."""
    functions, others = before
    changed = []
    for statement in current:
        if statement.is_function:
            old = functions.get(statement.key)
            if old is None or old.sql != statement.sql:
                changed.append(statement)
        elif statement.key not in others:
            changed.append(statement)
    return changed


def removed(current: list[Statement], before: tuple[dict[str, Statement], set[str]]) -> list[str]:
    """Functions the earlier migrations installed that no current file defines any more."""
    defined = {statement.key for statement in current if statement.is_function}
    return sorted(set(before[0]) - defined)


def render(migration: str, changed: list[Statement]) -> str:
    header = (
        f"-- Installed by migration {migration}: the statements of scheduler/sql/functions/ that changed\n"
        "-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).\n"
        "-- Never edit it: a later change ships in a new migration with a delta of its own.\n"
    )
    return header + "".join(f"\n{statement.text()}\n" for statement in changed)
