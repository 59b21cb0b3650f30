"""The OpenAPI document's typed job bodies: `POST /v2/jobs` as a discriminated union on `type`.

The server validates a job in two steps (api.schemas.JobIn for the envelope, then the job type's
params model in media.submission), so a wrong param is reported as `params.<field>` in one 422
with the envelope's own problems. The document describes the same contract in a form generators
understand: one schema per job type (`TranscodeJobIn`, ...) whose `type` is that type's name and
whose `params` is that type's params model, joined by `oneOf` with a `discriminator` mapping, so a
client generated from it (openapi-python-client and the like) gets typed params for every type.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError, create_model

from api.schemas import JobIn
from media.jobtypes import JOB_TYPES

REF = "#/components/schemas/{model}"
BODY = "JobCreateIn"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))


def params_required(params_model) -> bool:
    """Whether a job of this type needs params: its model refuses an empty object (compile_quad
    needs its inputs), so the schema must not call a body without `params` valid."""
    try:
        params_model.model_validate({})
    except ValidationError:
        return True
    return False


def job_in_variant(job_type) -> type[JobIn]:
    """The request body of one job type: JobIn with `type` fixed and `params` typed."""
    params_default = {} if params_required(job_type.params_model) else {"default_factory": dict}
    return create_model(
        f"{_camel(job_type.name)}JobIn",
        __base__=JobIn,
        __doc__=f"Create a {job_type.name} job. {job_type.description}",
        type=(Literal[job_type.name], Field(..., description="The job type")),
        params=(
            job_type.params_model,
            Field(**params_default, description=f"Parameters of {job_type.name}"),
        ),
    )


@cache
def job_body_schemas() -> dict[str, Any]:
    """{component name: JSON schema} for every job body, `JobCreateIn` (the union) included."""
    variants = tuple(job_in_variant(jt) for jt in JOB_TYPES.values())
    union = Annotated[Union[variants], Field(discriminator="type")]  # noqa: UP007 - a runtime tuple
    schema = TypeAdapter(union).json_schema(ref_template=REF)
    components = schema.pop("$defs")
    components[BODY] = {
        "title": BODY,
        "description": "A job to create: `type` picks the schema of `params` (see GET /v2/job-types).",
        **schema,
    }
    return components


def add_typed_job_bodies(document: dict[str, Any]) -> dict[str, Any]:
    """Point POST /v2/jobs at the union and add its schemas to the document's components."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in job_body_schemas().items():
        if name in schemas and schemas[name] != schema:
            raise RuntimeError(f"OpenAPI component {name} is defined twice, differently")
        schemas[name] = schema
    body = document["paths"]["/v2/jobs"]["post"]["requestBody"]
    body["content"]["application/json"]["schema"] = {"$ref": REF.format(model=BODY)}
    body["required"] = True
    if not _referenced(document, "JobIn"):
        schemas.pop("JobIn", None)
    return document


def _referenced(document: dict[str, Any], name: str) -> bool:
    target = REF.format(model=name)
    stack: list[Any] = [document["paths"], *document["components"]["schemas"].values()]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("$ref") == target:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
