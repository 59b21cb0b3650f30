import pytest

pytestmark = pytest.mark.django_db

def test_smoke(operator, worker, claim):
    r = operator.post("/v2/jobs", {"type": "noop", "params": {"seconds": 1}})
    print(r.status_code, r.json())
    job = r.json()["id"]
    print(operator.get("/v2/queue").json())
    print(operator.get(f"/v2/jobs/{job}/tasks").json())
    print(operator.get("/v2/workers").json())
    print(operator.get("/v2/stats").json())
    print(operator.get("/v1/sysinfo").json())
    r = operator.get("/metrics"); print(r.status_code, r["Content-Type"], r.content.decode()[:3000])
    r = operator.post("/v2/jobs", raw="{bad"); print(r.status_code, r.json())
    r = operator.post("/v2/jobs", {"type": "nope", "priority": 5000, "x": 1}); print(r.status_code, r.json())
    r = operator.get("/v2/jobs/abc"); print(r.status_code, r.content)
    r = operator.get("/v2/nothing"); print(r.status_code, r.content)
    r = operator.get("/v2/jobs", {"limit": 501}); print(r.status_code, r.content)
