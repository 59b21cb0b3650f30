"""The create-job form, generated from the same per-type params schema the API validates with.

`media.jobtypes.params_json_schema(type)` is a JSON Schema (pydantic's); each property
becomes one input, labelled in words (`form_labels`): numbers and integers with their bounds, enums
as selects, lists of enum values and booleans as checkboxes, UUIDs and paths as text (the template
turns `video_id` into a library picker and `ladder` into a rung editor), other lists of strings as
one-per-line text areas, nested objects as JSON. The form only turns inputs into JSON values; validation is `media.submission.create_job`'s,
so the dashboard accepts exactly what the API accepts and shows the same messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dashboard.form_labels import human_label
from media.jobtypes import JOB_TYPES, params_json_schema


@dataclass
class SchemaField:
    name: str
    title: str
    kind: str  # integer | number | boolean | enum | multi | string | uuid | list | json
    description: str = ""
    required: bool = False
    nullable: bool = False
    default: Any = None
    has_default: bool = False
    minimum: float | None = None
    maximum: float | None = None
    choices: list[str] = field(default_factory=list)
    item_kind: str = ""  # for lists: string | uuid
    value: str = ""  # what the input shows
    checked: bool = False
    selected: list[str] = field(default_factory=list)  # multi: the ticked choices
    error: str = ""

    @property
    def input_name(self) -> str:
        return f"p.{self.name}"

    @property
    def step(self) -> str:
        return "1" if self.kind == "integer" else "any"

    @property
    def placeholder(self) -> str:
        if self.kind == "list":
            return "one per line"
        if self.kind == "json":
            return "JSON, e.g. " + ("[{…}]" if self.item_kind == "object" else "{…}")
        if self.nullable and not self.has_default_value:
            return "optional"
        return ""

    @property
    def has_default_value(self) -> bool:
        return self.has_default and self.default is not None


def _resolve(node: dict, defs: dict) -> dict:
    ref = node.get("$ref")
    if ref and ref.startswith("#/$defs/"):
        return defs.get(ref.split("/")[-1], {})
    return node


def schema_fields(job_type: str) -> list[SchemaField]:
    schema = params_json_schema(job_type)
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    result = []
    for name, prop in schema.get("properties", {}).items():
        nullable = False
        inner = prop
        if "anyOf" in prop:
            branches = [b for b in prop["anyOf"] if b.get("type") != "null"]
            nullable = len(branches) < len(prop["anyOf"])
            inner = branches[0] if len(branches) == 1 else {"type": "json"}
        inner = _resolve(inner, defs)
        kind, item_kind, choices = "string", "", []
        if "enum" in inner:
            kind, choices = "enum", [str(c) for c in inner["enum"]]
        elif inner.get("type") in ("integer", "number", "boolean"):
            kind = inner["type"]
        elif inner.get("type") == "string":
            kind = "uuid" if inner.get("format") == "uuid" else "string"
        elif inner.get("type") == "array":
            items = _resolve(inner.get("items", {}), defs)
            if "enum" in items:
                kind, choices = "multi", [str(c) for c in items["enum"]]
            elif items.get("type") == "string":
                kind, item_kind = "list", "uuid" if items.get("format") == "uuid" else "string"
            else:
                kind, item_kind = "json", "object"
        else:
            kind = "json"
        f = SchemaField(
            name=name,
            title=human_label(name),
            kind=kind,
            description=prop.get("description", ""),
            required=name in required,
            nullable=nullable,
            default=prop.get("default"),
            has_default="default" in prop,
            minimum=inner.get("minimum", inner.get("exclusiveMinimum")),
            maximum=inner.get("maximum"),
            choices=choices,
            item_kind=item_kind,
        )
        f.value, f.checked = _initial(f)
        f.selected = [str(v) for v in f.default or []] if kind == "multi" else []
        result.append(f)
    # The library picker comes before the path it stands for (the schema lists input first).
    result.sort(key=lambda f: FIELD_ORDER.get(f.name, len(FIELD_ORDER)))
    return result


FIELD_ORDER = {"video_id": 0, "input": 1, "input_url": 2, "video_ids": 3, "inputs": 4, "input_urls": 5}


def _initial(f: SchemaField) -> tuple[str, bool]:
    if f.kind == "boolean":
        return "", bool(f.default)
    if not f.has_default_value:
        return "", False
    if f.kind == "json":
        return json.dumps(f.default), False
    if f.kind == "list":
        return "\n".join(str(v) for v in f.default), False
    return str(f.default), False


def _show(f: SchemaField, value: Any) -> None:
    """Put a params value into its input, written as the input reads it back."""
    if f.kind == "boolean":
        f.checked = bool(value)
    elif f.kind == "multi":
        f.selected = [str(v) for v in value or []]
    elif value is None:
        f.value = ""
    elif f.kind == "json":
        f.value = json.dumps(value)
    elif f.kind == "list":
        f.value = "\n".join(str(v) for v in value)
    else:
        f.value = str(value)


def _where(field_name: str, path: list[str]) -> str:
    """Where inside a field an error is, in words: ladder ["3", "height"] -> "rung 4 height"."""
    if path and path[0].isdigit():
        item = "rung" if field_name == "ladder" else "item"
        return " ".join([f"{item} {int(path[0]) + 1}", *(part.replace("_", " ") for part in path[1:])])
    return ".".join(path)


def _number(raw: str, integer: bool) -> Any:
    try:
        return int(raw) if integer else float(raw)
    except ValueError:
        if integer:
            try:
                as_float = float(raw)
            except ValueError:
                return raw  # let the schema say what is wrong
            return int(as_float) if as_float.is_integer() else raw
        return raw


MAX_JSON_FIELD_CHARS = 100_000
MAX_JSON_DEPTH = 32


def _nesting(raw: str) -> int:
    """The deepest bracket nesting of a JSON text (brackets inside strings count too: an upper bound)."""
    depth = deepest = 0
    for ch in raw:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json_field(raw: str) -> tuple[Any, str | None]:
    """(value, None) for a JSON field's text, or (None, why it is refused). Checked before parsing:
    size and nesting (json.loads recurses: 100,000 brackets raise RecursionError); a number of
    more than 4,300 digits raises ValueError without a position."""
    if len(raw) > MAX_JSON_FIELD_CHARS:
        return None, f"is longer than {MAX_JSON_FIELD_CHARS} characters"
    if _nesting(raw) > MAX_JSON_DEPTH:
        return None, f"is nested more than {MAX_JSON_DEPTH} levels deep"
    try:
        return json.loads(raw), None
    except json.JSONDecodeError as exc:
        return None, f"is not valid JSON ({exc.msg})"
    except (ValueError, RecursionError):
        return None, "is not valid JSON (a number is too long)"


class FormError(Exception):
    def __init__(self, errors: list[dict[str, str]]):
        super().__init__("invalid form")
        self.errors = errors


def params_from_post(fields: list[SchemaField], data) -> dict[str, Any]:
    """Turn the posted inputs into the params object; keep what was typed on each field."""
    params: dict[str, Any] = {}
    errors = []
    for f in fields:
        if f.kind == "boolean":
            f.checked = data.get(f.input_name) == "on"
            params[f.name] = f.checked
            continue
        if f.kind == "multi":
            # Shown as checkboxes: none ticked is an explicit [] (e.g. quality measuring off).
            f.selected = [v for v in data.getlist(f.input_name) if v]
            params[f.name] = f.selected
            continue
        raw = data.get(f.input_name, "")
        f.value = raw
        raw = raw.strip()
        if raw == "":
            continue  # omitted: the schema's default (or its "required" message) applies
        if f.kind in ("integer", "number"):
            params[f.name] = _number(raw, f.kind == "integer")
        elif f.kind == "list":
            params[f.name] = [line.strip() for line in raw.splitlines() if line.strip()]
        elif f.kind == "json":
            value, problem = parse_json_field(raw)
            if problem:
                errors.append({"field": f"params.{f.name}", "message": problem})
            else:
                params[f.name] = value
        else:
            params[f.name] = raw
    if errors:
        raise FormError(errors)
    return params


@dataclass
class JobForm:
    """The whole create-job form: type, the schema's fields and the job options the API takes."""

    job_type: str
    fields: list[SchemaField]
    options: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # field -> message (top-level and params)
    general: list[str] = field(default_factory=list)
    rerun_of: Any = None  # the job a re-run copies (shown above the form)

    @classmethod
    def for_type(cls, job_type: str) -> JobForm:
        return cls(
            job_type,
            schema_fields(job_type),
            {
                "priority": "0",
                "max_attempts": "4",
                "hardware": "auto",
                "required_worker_uid": "",
                "resource_category": "",
                "vram_mb": "",
                "webhook_url": "",
            },
        )

    def prefill(self, job) -> None:
        """Show a job's params and options (a re-run: the operator checks them, then creates)."""
        for f in self.fields:
            if f.name in job.params:
                _show(f, job.params[f.name])
        self.options.update(
            {
                "priority": str(job.priority),
                "max_attempts": str(job.max_attempts),
                "hardware": job.hardware,
                "resource_category": job.resource_category or "",
                "vram_mb": "" if job.vram_mb is None else str(job.vram_mb),
                "webhook_url": job.webhook_url or "",
            }
        )

    @property
    def job_types(self):
        return JOB_TYPES.values()

    @property
    def description(self) -> str:
        return JOB_TYPES[self.job_type].description

    @property
    def gpu_path(self) -> bool:
        return JOB_TYPES[self.job_type].gpu_path

    def payload(self, data) -> dict[str, Any]:
        """The body `create_job` takes (the same as POST /v2/jobs)."""
        params = params_from_post(self.fields, data)
        for key in self.options:
            self.options[key] = data.get(key, "").strip()
        body: dict[str, Any] = {"type": self.job_type, "params": params}
        for key in ("priority", "max_attempts", "vram_mb"):
            if self.options[key] != "":
                body[key] = _number(self.options[key], True)
        for key in ("hardware", "required_worker_uid", "resource_category", "webhook_url"):
            if self.options[key] != "":
                body[key] = self.options[key]
        return body

    def add_errors(self, errors: list[dict[str, str]]) -> None:
        by_name = {f.name: f for f in self.fields}
        for error in errors:
            name, message = error.get("field", ""), error.get("message", "invalid")
            parts = name.split(".")
            if parts[0] == "params" and len(parts) > 1 and parts[1] in by_name:
                target = by_name[parts[1]]
                detail = _where(parts[1], parts[2:])
                target.error = "; ".join(
                    filter(None, [target.error, f"{detail}: {message}" if detail else message])
                )
            elif name in self.options or name == "type":
                self.errors[name] = message
            else:
                self.general.append(f"{name}: {message}" if name else message)
