"""The fault-injection soak: real worker processes over thousands of `noop` jobs while workers are
killed, frozen and cut off, PostgreSQL restarts and operators reorder the queue; afterwards every
invariant of docs/reliability.md is checked in SQL.

- `harness`: orchestration (`run_soak`), the figures it prints.
- `faults`: worker processes and the faults (SIGKILL, SIGSTOP/SIGCONT, SIGTERM, an operator's drain
  or evacuation, pg_terminate_backend, PostgreSQL restart), operator chaos and the stale-write prober.
- `invariants`: every invariant as one SQL query with a named pass/fail result and a count.
- `postgres`: a private PostgreSQL instance (for the restart fault) and scratch databases.

Run it with `python -m tools.soak` (see docs/reliability.md).
"""
