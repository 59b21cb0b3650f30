"""Proposed scheduler changes, measurable without editing the scheduler's files.

`python -m bench --proposal NAME ...` applies each named proposal to the bench database after
`manage.py migrate`: the function's current definition is taken from scheduler/sql/functions_v1.sql,
the proposal's text substitutions are made, and the result is run with CREATE OR REPLACE. Nothing in
the repository changes. A proposal whose change is already in the source stops the run with
"already merged"; one whose substitution no longer matches stops it with "no longer applies".
docs/benchmarks.md explains each proposal and its measured effect; the JSON records which ones a
run used.

Changes this suite found and that have since been merged (so they are no longer proposals): the
claim's commit without waiting for its WAL flush, the noop's extra progress write at 100 %, the
per-claim `SELECT 1` health check, the queue list ordered along `schedule_group_order`, and 100
entries per dashboard queue page. Measured and dropped: claims locking their worker row FOR SHARE
instead of FOR NO KEY UPDATE (no effect beyond the noise).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench import db

SQL_FILE = db.ROOT / "scheduler" / "sql" / "functions_v1.sql"

# The write path of a stage: every transition a noop job goes through.
HOT_PATH = (
    "claim_task_v1",
    "refresh_job_v1",
    "enqueue_job_v1",
    "finish_task_v1",
    "lock_for_fenced_write_v1",
    "report_progress_v1",
    "fail_task_v1",
    "release_task_v1",
    "heartbeat_tasks_v1",
)


@dataclass(frozen=True)
class Proposal:
    name: str
    functions: tuple[str, ...]
    substitutions: tuple[tuple[str, str], ...]  # per function: every one whose text is found (at least one)
    merged_marker: str  # present in the source once the change is merged
    why: str


PROPOSALS = {
    p.name: p
    for p in [
        Proposal(
            "hot-path-no-seqscan",
            HOT_PATH,
            (
                ("LANGUAGE plpgsql AS $$", "LANGUAGE plpgsql\nSET enable_seqscan = off\nAS $$"),
                ("SET jit = off\nAS $$", "SET jit = off\nSET enable_seqscan = off\nAS $$"),
            ),
            "SET enable_seqscan = off\nAS $$",
            "the write path's primary-key lookups are planned once per session and cached; planned while the "
            "queue's statistics say it is empty (a fresh or drained queue after ANALYZE) they are sequential "
            "scans, ~20 per stage, each reading the whole table; pinning index access the way claim_task_v1 "
            "already pins its walk (SET enable_sort/enable_bitmapscan) keeps them O(1)",
        ),
    ]
}


def function_source(sql: str, name: str) -> str:
    """The `CREATE OR REPLACE FUNCTION name(...) ... $$;` statement from the SQL file."""
    match = re.search(rf"CREATE OR REPLACE FUNCTION {re.escape(name)}\(.*?\n\$\$;\n", sql, re.S)
    if match is None:
        raise RuntimeError(f"{name} not found in {SQL_FILE}")
    return match.group(0)


def build(names: list[str]) -> dict[str, str]:
    """{function name: patched CREATE OR REPLACE statement} for the given proposals."""
    sql = SQL_FILE.read_text()
    patched: dict[str, str] = {}
    for name in names:
        proposal = PROPOSALS.get(name)
        if proposal is None:
            raise SystemExit(f"unknown proposal {name!r}; known: {', '.join(PROPOSALS)}")
        for function in proposal.functions:
            text = patched.get(function) or function_source(sql, function)
            if proposal.merged_marker in function_source(sql, function):
                raise RuntimeError(f"proposal {name} is already merged into {function}")
            matched = [(old, new) for old, new in proposal.substitutions if old in text]
            if not matched:
                raise RuntimeError(
                    f"proposal {name} no longer applies to {function}: "
                    f"{proposal.substitutions[0][0].strip()[:80]!r} not found (the function changed)"
                )
            for old, new in matched:
                text = text.replace(old, new, 1)
            patched[function] = text
    return patched


def apply(url: str, names: list[str]) -> list[dict]:
    statements = build(names)
    with db.connect(url) as conn:
        for statement in statements.values():
            conn.execute(statement)
    return [{"name": n, "functions": list(PROPOSALS[n].functions), "why": PROPOSALS[n].why} for n in names]
