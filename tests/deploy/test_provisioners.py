"""The example provisioners of deploy/provisioners/ read the provisioner document
(workers/provisioner.py). local.py runs in tests/worker/test_dedicated.py against real workers;
the Kubernetes template is only rendered here (no cluster, no kubectl)."""

import json
import subprocess
import sys

from tests.kit import ROOT

KUBERNETES = ROOT / "deploy" / "provisioners" / "kubernetes_job.py"
RESERVATION = "3f2a9c1d-0000-4000-8000-000000000001"


def render(document, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(KUBERNETES), "--print"],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=30,
    )


def test_the_kubernetes_template_renders_one_job_per_reservation():
    document = {"reservation_id": RESERVATION, "job": {"id": "j1", "required_category": "gpu_encode"}}
    done = render(document, JETENCODE_K8S_IMAGE="registry/jetencode:1.2", JETENCODE_K8S_ENV_SECRET="jet-env")
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert (
        manifest["kind"] == "Job" and manifest["metadata"]["name"] == f"jetencode-reservation-{RESERVATION}"
    )
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry/jetencode:1.2"
    assert container["args"][-2:] == ["--reservation", RESERVATION]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert container["envFrom"] == [{"secretRef": {"name": "jet-env"}}]
    assert manifest["spec"]["backoffLimit"] == 0  # the scheduler re-provisions a lost worker itself
    # The same document renders the same manifest: kubectl apply is idempotent by reservation.
    assert (
        render(
            document, JETENCODE_K8S_IMAGE="registry/jetencode:1.2", JETENCODE_K8S_ENV_SECRET="jet-env"
        ).stdout
        == done.stdout
    )


def test_a_bad_document_is_refused_with_a_line_on_stderr():
    done = render({"reservation_id": "not-a-uuid"})
    assert done.returncode == 2 and done.stderr.strip().startswith("bad provisioner document")
