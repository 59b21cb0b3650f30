#!/usr/bin/env python3
"""A JetEncode provisioner template for Kubernetes: renders a Job that runs
`manage.py runworker --reservation ID` from the provisioner document on stdin and applies it with
kubectl (docs/scheduler.md, "Dedicated execution"). Not run by the test suite; adapt it.

    JETENCODE_PROVISIONER="python3 deploy/provisioners/kubernetes_job.py" manage.py provision
    python3 deploy/provisioners/kubernetes_job.py --print < document.json   # only print the manifest

Idempotent by reservation id: the Job is named jetencode-reservation-<id>, and `kubectl apply`
of the same manifest changes nothing. Settings (environment):
  JETENCODE_K8S_IMAGE        the JetEncode image (default jetencode:latest)
  JETENCODE_K8S_NAMESPACE    namespace (default: kubectl's current one)
  JETENCODE_K8S_ENV_SECRET   a Secret whose keys become the worker's environment (DATABASE_URL, …)
  KUBECTL                    the kubectl binary (default kubectl)
A GPU job (job.required_category gpu_encode/gpu_ai) asks for one nvidia.com/gpu.
kubectl's exit status and its stderr's last line are what the scheduler records on failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid


def manifest(document: dict) -> dict:
    reservation = str(uuid.UUID(str(document["reservation_id"])))
    job = document.get("job") or {}
    gpu = job.get("required_category") in ("gpu_encode", "gpu_ai") or job.get("hardware") == "gpu"
    container = {
        "name": "worker",
        "image": os.environ.get("JETENCODE_K8S_IMAGE", "jetencode:latest"),
        "args": ["python", "manage.py", "runworker", "--reservation", reservation],
        "resources": {"limits": {"nvidia.com/gpu": 1}} if gpu else {},
    }
    secret = os.environ.get("JETENCODE_K8S_ENV_SECRET")
    if secret:
        container["envFrom"] = [{"secretRef": {"name": secret}}]
    labels = {
        "app.kubernetes.io/name": "jetencode-worker",
        "jetencode.io/reservation": reservation,
        "jetencode.io/job": str(job.get("id", "")),
    }
    metadata = {"name": f"jetencode-reservation-{reservation}", "labels": labels}
    if os.environ.get("JETENCODE_K8S_NAMESPACE"):
        metadata["namespace"] = os.environ["JETENCODE_K8S_NAMESPACE"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            # The scheduler re-provisions a lost worker itself (a new generation): no pod retries.
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    # runworker drains on SIGTERM: give running stages time to hand back.
                    "terminationGracePeriodSeconds": 60,
                    "containers": [container],
                },
            },
        },
    }


def main(argv: list[str]) -> int:
    try:
        rendered = manifest(json.load(sys.stdin))
    except (ValueError, KeyError, TypeError) as exc:
        print(f"bad provisioner document: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(rendered, indent=2)
    if "--print" in argv:
        print(text)
        return 0
    done = subprocess.run([os.environ.get("KUBECTL", "kubectl"), "apply", "-f", "-"], input=text.encode())
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
