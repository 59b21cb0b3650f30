"""The suite's shared vocabulary: one home for each helper the test folders use.

- `db`: raw SQL reads and test-setup writes (`sql`, `one`), the claim shortcuts (`claim`, `lease_of`),
  the clock tricks tests need (`expire_lease`, `make_available`, `silence_worker`), a DATABASE_URL
  for subprocesses;
- `waiting`: `wait_for`, polling a condition with a deadline;
- `workers`: real `manage.py runworker` processes (`WorkerProcess`, `Workers`, the short `TIMING`),
  and `InProcessWorker`, the worker runtime's own classes driven in this process for handler tests;
- `stages`: stage handlers that exist only for tests, loaded by worker processes by path;
- `personas`: the cast (alice, bob, charlie, dave) and who may do what;
- `web`: HTTP clients as the personas use them (`Api` with a bearer token, `Caller` on either
  transport) and a local webhook `Receiver`;
- `matrix`: the authorization matrix (every API operation, dashboard and admin action, its target
  and its effect) and the database `fingerprint` that proves a refused request changed nothing;
- `media`: generated clips and private media/output/workspace roots;
- `tcpproxy`: a TCP proxy between a worker and PostgreSQL whose link a test can cut or stall.

Fixtures stay in the conftest.py files (pytest's mechanism); they are built from these modules.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: manage.py, deploy/, var/
