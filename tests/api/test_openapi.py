"""The OpenAPI document as client generators read it: typed job bodies, enums, headers, errors."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from media.jobtypes import JOB_TYPES
from scheduler.constants import JOB_STATUSES, TASK_STATES

pytestmark = pytest.mark.django_db


@pytest.fixture
def document():
    return Client().get("/v2/openapi.json").json()


def resolve(document, ref):
    assert ref.startswith("#/components/schemas/"), ref
    return document["components"]["schemas"][ref.rsplit("/", 1)[1]]


def test_the_job_body_is_a_union_discriminated_on_type(document):
    body = document["paths"]["/v2/jobs"]["post"]["requestBody"]
    assert body["required"] is True
    union = resolve(document, body["content"]["application/json"]["schema"]["$ref"])
    mapping = union["discriminator"]["mapping"]
    assert union["discriminator"]["propertyName"] == "type"
    assert sorted(mapping) == sorted(JOB_TYPES)
    assert sorted(r["$ref"] for r in union["oneOf"]) == sorted(mapping.values())
    for name, ref in mapping.items():
        variant = resolve(document, ref)
        assert variant["properties"]["type"]["const"] == name
        assert "type" in variant["required"]
        params = resolve(document, variant["properties"]["params"]["$ref"])
        assert params["title"] == JOB_TYPES[name].params_model.__name__
        own = JOB_TYPES[name].params_model.model_json_schema(ref_template="#/components/schemas/{model}")
        assert params["properties"] == own["properties"]
        assert variant["additionalProperties"] is False
    assert "JobIn" not in document["components"]["schemas"]  # the untyped envelope is not advertised


def test_status_and_state_fields_are_enums(document):
    schemas = document["components"]["schemas"]
    assert schemas["JobSummaryOut"]["properties"]["status"]["enum"] == list(JOB_STATUSES)
    assert schemas["StageOut"]["properties"]["state"]["enum"] == list(TASK_STATES)
    assert schemas["QueueEntryOut"]["properties"]["state"]["enum"] == list(JOB_STATUSES)
    task_state = schemas["QueueEntryOut"]["properties"]["task_state"]["anyOf"]
    assert {"enum": list(TASK_STATES), "type": "string"} in task_state
    assert schemas["WorkerOut"]["properties"]["lifecycle"]["enum"] == ["active", "draining", "offline"]


def test_201_declares_location_and_every_operation_declares_500_and_503(document):
    created = document["paths"]["/v2/jobs"]["post"]["responses"]["201"]
    assert created["headers"]["Location"]["schema"] == {"type": "string"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert {"500", "503"} <= set(operation["responses"]), (method, path)


def test_the_tus_routes_are_described_with_their_headers(document):
    """They are plain views (api.uploads) described by hand (api.openapi_tus); tests/api/test_uploads.py
    checks every status they answer against this description."""
    collection, upload = document["paths"]["/v2/uploads/"], document["paths"]["/v2/uploads/{upload_id}"]
    assert set(collection) == {"options", "post"}
    assert set(upload) == {"options", "head", "patch", "delete", "get"}
    assert collection["options"]["security"] == []  # discovery needs no credentials
    create = {p["name"]: p for p in collection["post"]["parameters"]}
    assert create["Upload-Length"]["required"] and create["Tus-Resumable"]["schema"]["enum"] == ["1.0.0"]
    assert "Location" in collection["post"]["responses"]["201"]["headers"]
    patch = upload["patch"]
    assert list(patch["requestBody"]["content"]) == ["application/offset+octet-stream"]
    assert {"409", "460"} <= set(patch["responses"])
    assert "Upload-Offset" in upload["head"]["responses"]["200"]["headers"]
    operation_ids = [
        op["operationId"]
        for item in document["paths"].values()
        for op in item.values()
        if "operationId" in op
    ]
    assert len(operation_ids) == len(set(operation_ids))


def test_whole_number_floats_are_integers(operator_api):
    response = operator_api.post(
        "/v2/jobs", {"type": "noop", "params": {"children": 2.0}, "priority": 152.0, "max_attempts": 3.0}
    )
    assert response.status_code == 201, response.content
    job = response.json()
    assert (job["priority"], job["max_attempts"], job["params"]["children"]) == (152, 3, 2)
    assert type(job["priority"]) is int
    refused = operator_api.post("/v2/jobs", {"type": "noop", "priority": 152.5, "max_attempts": True})
    assert refused.status_code == 422
    assert sorted(e["field"] for e in refused.json()["errors"]) == ["max_attempts", "priority"]
    assert operator_api.patch(f"/v2/queue/{job['id']}/priority", {"priority": 7.0}).json()["priority"] == 7


@pytest.mark.skipif(
    shutil.which("openapi-python-client") is None
    and not Path(sys.executable).with_name("openapi-python-client").exists(),
    reason="openapi-python-client is not installed (a dev dependency)",
)
def test_a_generated_client_has_typed_params_and_parses_responses(
    document, operator_api, tmp_path, monkeypatch
):
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(document))
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    generated = subprocess.run(
        [
            "openapi-python-client",
            "generate",
            "--path",
            str(spec),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / "jetclient"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "Warning" not in generated.stdout, generated.stdout
    monkeypatch.syspath_prepend(str(tmp_path))
    models = importlib.import_module("jetclient.models")
    # One typed body and one typed params class per job type.
    for name, job_type in JOB_TYPES.items():
        camel = "".join(part.capitalize() for part in name.split("_"))
        assert hasattr(models, f"{camel}JobIn"), name
        assert hasattr(models, job_type.params_model.__name__), name
    body = models.NoopJobIn(type_="noop", params=models.NoopParams(seconds=0.5, children=1), priority=3)
    response = operator_api.post("/v2/jobs", body.to_dict())
    assert response.status_code == 201, response.content
    job = models.JobDetailOut.from_dict(response.json())
    assert (
        job.status == models.JobDetailOutStatus.PENDING and job.params.additional_properties["children"] == 1
    )
    with pytest.raises(TypeError):
        models.TranscodeParams(no_such_param=1)  # typed: unknown params fail in the client
