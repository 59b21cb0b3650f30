"""Proposed scheduler changes, measurable without editing the scheduler's files.

`python -m bench --proposal NAME ...` applies each named proposal:
- a scheduler proposal to the bench database after `manage.py migrate`: the function's current
  definition is taken from scheduler/sql/functions_v1.sql, the proposal's text substitutions are
  made, and the result is run with CREATE OR REPLACE;
- a read-side proposal inside the bench process only (the API/dashboard measurement runs there):
  the named query text from scheduler/sql/queries.sql, or a view's constant, is replaced in memory;
- a worker proposal inside the bench's worker processes only (bench/stages.py patches the runtime
  when the worker imports it).
If the source has changed so that a substitution no longer matches, the run stops and says so (the
proposal is then either merged or needs re-basing). Nothing in the repository is modified.
docs/benchmarks.md explains each proposal and its measured effect; the JSON records which ones a
run used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench import db

SQL_FILE = db.ROOT / "scheduler" / "sql" / "functions_v1.sql"


@dataclass(frozen=True)
class Proposal:
    name: str
    function: str
    substitutions: tuple[tuple[str, str], ...]
    why: str


PROPOSALS = {
    p.name: p
    for p in [
        Proposal(
            "claim-async-commit",
            "claim_task_v1",
            ((
                "  -- 2. Serialize selection with operator controls.\n",
                "  -- The claim's commit does not wait for its WAL flush: the singleton is held for the\n"
                "  -- selection only. Safe: a later synchronous commit (progress, finish, any control)\n"
                "  -- flushes it first, and a claim lost in a crash is fenced out like an expired lease.\n"
                "  PERFORM set_config('synchronous_commit', 'off', true);\n"
                "  -- 2. Serialize selection with operator controls.\n",
            ),),
            "the serialized section of each claim includes its commit's WAL flush (fdatasync); without it "
            "the singleton is held only while the claim computes",
        ),
        Proposal(
            "claim-worker-share",
            "claim_task_v1",
            ((
                "SELECT * INTO w FROM queue_workers q WHERE q.uid = p_worker FOR NO KEY UPDATE;",
                "SELECT * INTO w FROM queue_workers q WHERE q.uid = p_worker FOR SHARE;",
            ),),
            "claims lock their worker row FOR NO KEY UPDATE while they queue for the singleton, which blocks "
            "every finish of that worker (FOR SHARE) behind the global claim queue; the singleton already "
            "serializes claims, so FOR SHARE (still blocking a re-registration) is enough",
        ),
    ]
}


@dataclass(frozen=True)
class ReadProposal:
    name: str
    query: str | None  # a query name in scheduler/sql/queries.sql, or None for a Python constant
    substitutions: tuple[tuple[str, str], ...]
    why: str
    constant: tuple[str, str, object] | None = None  # (module, attribute, new value)


READ_PROPOSALS = {
    p.name: p
    for p in [
        ReadProposal(
            "queue-list-index-order",
            "queue_list",
            ((
                "ORDER BY NULLIF(s.group_key, '') NULLS FIRST, s.priority DESC, s.position, s.media_runnable_at, j.id",
                "ORDER BY s.group_key, s.priority DESC, s.position, s.job_id",
            ),),
            "the list's ORDER BY matches no index, so every page joins and sorts every unfinished job; ordered "
            "like schedule_group_order ('' sorts first, as NULLS FIRST did) the plan walks that index and "
            "stops after one page",
        ),
        ReadProposal(
            "dashboard-queue-page-100",
            None,
            (),
            "the queue page renders 500 entries (about 3 KB of HTML each); 100 per page",
            constant=("dashboard.views.queue", "PAGE_SIZE", 100),
        ),
    ]
}


def apply_read(names: list[str]) -> list[dict]:
    """Apply read-side proposals in this process (after django.setup())."""
    import importlib

    from scheduler import queries

    applied = []
    for name in names:
        proposal = READ_PROPOSALS[name]
        if proposal.query is not None:
            loaded = queries.load_queries()  # cached: the dict the read functions use
            text = loaded[proposal.query]
            for old, new in proposal.substitutions:
                if old not in text:
                    raise RuntimeError(f"proposal {name} no longer applies to query {proposal.query}: "
                                       f"{old[:80]!r} not found")
                text = text.replace(old, new, 1)
            loaded[proposal.query] = text
        if proposal.constant is not None:
            module, attribute, value = proposal.constant
            target = importlib.import_module(module)
            if not hasattr(target, attribute):
                raise RuntimeError(f"proposal {name} no longer applies: {module}.{attribute} not found")
            setattr(target, attribute, value)
        applied.append({"name": name, "query": proposal.query, "why": proposal.why})
    return applied


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
            raise SystemExit(f"unknown proposal {name!r}; known: {', '.join(ALL)}")
        text = patched.get(proposal.function) or function_source(sql, proposal.function)
        for old, new in proposal.substitutions:
            if old not in text:
                raise RuntimeError(f"proposal {name} no longer applies to {proposal.function}: {old.strip()[:80]!r} "
                                   "not found (merged already, or the function changed)")
            text = text.replace(old, new, 1)
        patched[proposal.function] = text
    return patched


def apply(url: str, names: list[str]) -> list[dict]:
    statements = build(names)
    with db.connect(url) as conn:
        for statement in statements.values():
            conn.execute(statement)
    return [{"name": n, "function": PROPOSALS[n].function, "why": PROPOSALS[n].why} for n in names]


# Worker hot-path proposals: applied inside the bench's worker processes by bench/stages.py (the
# extra stage module every bench worker loads) when JETENCODE_BENCH_WORKER_PROPOSALS names them.
WORKER_PROPOSALS = {
    "no-final-progress-write": (
        "a stage's progress(100) just before it returns is its own write transaction (a commit and WAL "
        "flush per stage) although the finish records progress 100 in the same breath; skip it"),
    "no-health-check": (
        "CONN_HEALTH_CHECKS makes every slot send SELECT 1 before each claim (close_old_connections); the "
        "worker already reconnects on DB errors, so its slots can go without"),
}
WORKER_ENV = "JETENCODE_BENCH_WORKER_PROPOSALS"

ALL = (*PROPOSALS, *READ_PROPOSALS, *WORKER_PROPOSALS)


def split(names: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(scheduler, read-side, worker) proposals; exits on an unknown name."""
    unknown = [n for n in names if n not in ALL]
    if unknown:
        raise SystemExit(f"unknown proposal(s) {', '.join(unknown)}; known: {', '.join(ALL)}")
    return ([n for n in names if n in PROPOSALS], [n for n in names if n in READ_PROPOSALS],
            [n for n in names if n in WORKER_PROPOSALS])
