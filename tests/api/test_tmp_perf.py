import time
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db

def test_perf(operator, failed_job, completed_job, enqueue):
    for _ in range(5): enqueue()
    for path, params in [("/v2/jobs", {}), ("/v2/jobs", {"resource_category": "gpu_ai", "worker": "x", "type": "noop", "status": "pending"}), ("/v2/queue", {}), ("/v2/stats", {}), ("/v2/workers", {}), (f"/v2/jobs/{failed_job}", {}), ("/v2/job-types", {})]:
        operator.get(path, params)
        with CaptureQueriesContext(connection) as ctx:
            t = time.perf_counter()
            r = operator.get(path, params)
            dt = time.perf_counter() - t
        print(path, r.status_code, f"{dt*1000:.1f}ms", len(ctx.captured_queries), [ (q['time'], q['sql'][:80]) for q in ctx.captured_queries])
