"""`python -m bench`: see bench/run.py and docs/benchmarks.md."""

import os
import secrets
import sys

# The bench points its processes at a PostgreSQL server (DATABASE_URL), and a process with a server
# and DEBUG off refuses to start without a secret key (docs/security.md): the bench's databases are
# throwaway, so is their key.
os.environ.setdefault("JETENCODE_SECRET_KEY", "bench-" + secrets.token_urlsafe(40))
# Measured as deployed: with DEBUG on (a developer's shell) Django wraps every cursor to record
# its queries, which adds to the workers' CPU per stage.
os.environ["JETENCODE_DEBUG"] = "false"

from bench.run import main  # noqa: E402

sys.exit(main())
