"""Per-job-type parameter schemas (pydantic v2).

One model per job type; the API, the dashboard form and the worker all validate with these, so a
job that was accepted is a job the worker can run. Every number is bounded (nothing overflows into
a 500 or an absurd FFmpeg run), unknown fields are refused (`extra="forbid"`), and every path is
checked by `media.paths` at submission (the worker checks again).
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections import Counter
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from media.paths import UnsafePathError, check_relative, open_media_file, resolve_media_path
from media.probe import reference_problems
from media.sources.guard import MAX_URL_CHARS, UnsafeSourceURL, fetch_allows_http
from media.sources.guard import check_shape as check_source_shape

Preset = Literal[
    "ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"
]
Orientation = Literal["any", "landscape", "portrait", "square"]

MAX_SECONDS = 24 * 3600.0  # no media position or length beyond a day
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
Crf = Annotated[int, Field(ge=0, le=51, description="x264 constant rate factor (lower is better quality)")]
VideoKbps = Annotated[int, Field(ge=100, le=100_000)]
AudioKbps = Annotated[int, Field(ge=32, le=512)]
Width = Annotated[int, Field(ge=16, le=7680)]
Height = Annotated[int, Field(ge=16, le=4320)]
MAX_INPUTS = 64

# What the schema declares of a media-root path: a subset of what media.paths accepts (no control,
# '%', ':' or '\\' anywhere; no component starting with '.', '-', '~' or a space; at most 63
# characters a component and 256 in all, so never past the byte limits), so no request the OpenAPI
# document calls valid is refused for its path's shape (only for a file that is not there). Lone
# surrogates are refused too, but not in the pattern: a `\ud800` escape makes it an invalid regex
# for JSON Schema validators (jsonschema-rs), which then ignore the whole pattern.
_NOT_IN_PATH = "\\u0000-\\u001f\\u007f\\\\%:/"
_COMPONENT = f"[^{_NOT_IN_PATH}.~ -][^{_NOT_IN_PATH}]{{0,62}}"
MEDIA_PATH_PATTERN = f"^{_COMPONENT}(/{_COMPONENT})*$"
# The input_url shape the schema declares: a subset of media.sources.guard.check_shape (https with a
# plain host name, or s3://bucket/key); whether the host is public is known only when asked.
SOURCE_URL_PATTERN = (
    "^(https://[A-Za-z0-9][A-Za-z0-9.-]{0,252}(/[^\\u0000-\\u0020\\u007f]*)?"
    "|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\\u0000-\\u0020\\u007f/][^\\u0000-\\u0020\\u007f]*)$"
)
SourceURL = Annotated[str, WithJsonSchema({"type": "string", "pattern": SOURCE_URL_PATTERN})]
# One of a multi-input type's input_urls: its length bound declared as well as enforced.
SourceURLItem = Annotated[
    str,
    Field(max_length=MAX_URL_CHARS),
    WithJsonSchema({"type": "string", "pattern": SOURCE_URL_PATTERN, "maxLength": MAX_URL_CHARS}),
]
MediaPath = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": MEDIA_PATH_PATTERN, "maxLength": 256})
]


def _check_media_file(value: str, what: str) -> str:
    return _check_media_files([value], [what])[0]


def _check_media_files(values: list[str], whats: list[str]) -> list[str]:
    """Each file opened by descriptor (media.paths.open_media_file), and only the descriptors are
    read: in one probe process for all of them (a playlist or concat list makes FFmpeg read the
    files it names, anywhere: media.probe.reference_problems)."""
    with contextlib.ExitStack() as opened:
        fds, names = [], []
        for value, what in zip(values, whats, strict=True):
            try:
                fd, path = opened.enter_context(open_media_file(value, what=what))
            except UnsafePathError as exc:
                raise ValueError(str(exc)) from None
            fds.append(fd)
            names.append(path.name)
        problems = reference_problems(fds, names)
    for what, problem in zip(whats, problems, strict=True):
        if problem:
            raise ValueError(f"{what} {problem}")
    return [check_relative(value, what=what).as_posix() for value, what in zip(values, whats, strict=True)]


def _check_media_dir(value: str, what: str) -> str:
    try:
        resolve_media_path(value, what=what, kind="dir", must_exist=True)
    except UnsafePathError as exc:
        raise ValueError(str(exc)) from None
    return check_relative(value, what=what).as_posix()


def _check_target_dir(value: str, what: str) -> str:
    """A directory we will create if needed: safe shape, and not a file if it exists."""
    try:
        resolve_media_path(value, what=what, kind="dir")
    except UnsafePathError as exc:
        raise ValueError(str(exc)) from None
    return check_relative(value, what=what).as_posix()


# --- output bounds (hardening) ---------------------------------------------------------------------
# Per-field bounds are not output bounds: a 2x2 grid of 7680-wide cells is 15360 wide, and a grid of
# 64 of them is 61440x34560. These bound what a job may *produce* (docs/security.md, "Limits"); each
# refusal is a 422 naming the field. What depends on the media (the length of a compilation) is
# checked by the dispatch stage against the same constants (workers/stages/compile.py).
MAX_OUTPUT_WIDTH = 7680
MAX_OUTPUT_HEIGHT = 4320
MAX_OUTPUT_PIXELS = MAX_OUTPUT_WIDTH * MAX_OUTPUT_HEIGHT  # 8K UHD, 33.2 megapixels per frame
MAX_OUTPUT_SECONDS = 4 * 3600.0  # a compilation, whatever its sources add up to
MAX_OUTPUT_FRAMES = 864_000  # 4 hours at 60 fps; at 120 fps a compilation may last 2 hours
MAX_SOURCE_REPEATS = 4  # one file, URL or asset may appear at most this often in a type's sources


def _grid_size(count: int, columns: int | None, cell_width: int, cell_height: int) -> tuple[int, int]:
    """Width and height of a grid of `count` cells, as compile_mega lays it out."""
    columns = columns or max(1, math.ceil(math.sqrt(count)))
    rows = max(1, math.ceil(count / columns))
    return columns * cell_width, rows * cell_height


def check_grid_side(value: int, info: ValidationInfo, *, fixed_columns: int | None = None) -> int:
    """A field validator for cell_width / cell_height: the whole grid must fit MAX_OUTPUT_WIDTH x
    MAX_OUTPUT_HEIGHT. Reads the sources and columns validated before it (pydantic's field order)."""
    data = info.data
    if data.get("layout", "grid") != "grid":
        return value
    sources = given_sources(data.get)
    count = fixed_columns * fixed_columns if fixed_columns else max(1, len(sources))
    columns = fixed_columns or data.get("columns")
    if info.field_name == "cell_width":
        width, _ = _grid_size(count, columns, value, 1)
        if width > MAX_OUTPUT_WIDTH:
            raise ValueError(
                f"the grid would be {width} pixels wide (columns x cell_width); at most {MAX_OUTPUT_WIDTH}"
            )
    else:
        _, height = _grid_size(count, columns, 1, value)
        if height > MAX_OUTPUT_HEIGHT:
            raise ValueError(
                f"the grid would be {height} pixels high (rows x cell_height); at most {MAX_OUTPUT_HEIGHT}"
            )
    return value


def check_repeats(values: list, what: str) -> list:
    """No source more than MAX_SOURCE_REPEATS times (64 copies of one asset is one job's worth of
    decoders and memory for a single file)."""
    for value, times in Counter(str(v) for v in values).items():
        if times > MAX_SOURCE_REPEATS:
            raise ValueError(f"{what} names {value} {times} times; at most {MAX_SOURCE_REPEATS}")
    return values


def check_output_duration(seconds: float, fps: float, what: str) -> str | None:
    """Why an output of `seconds` at `fps` is too long, or None."""
    if seconds > MAX_OUTPUT_SECONDS:
        return f"{what} would last {seconds:.0f} s, more than the limit of {MAX_OUTPUT_SECONDS:.0f} s"
    if seconds * fps > MAX_OUTPUT_FRAMES:
        return f"{what} would have {seconds * fps:.0f} frames, more than the limit of {MAX_OUTPUT_FRAMES}"
    return None


# --- the params models -------------------------------------------------------------------------------


def _json_kind(annotation) -> str | None:
    """ "boolean", "integer" or "number" when a field holds one of those (optional or not), else None."""
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer"
    if annotation is float:
        return "number"
    if get_origin(annotation) is Annotated:
        return _json_kind(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        kinds = {_json_kind(arg) for arg in get_args(annotation) if arg is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    return None


def _is_json_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def strict_json_value(kind: str | None, value):
    """Refuse what pydantic's lax mode would convert: `true` or `"1"` for an integer, `1` or `"yes"`
    for a boolean. JSON has one number type, so 152.0 is still the integer 152 (pydantic's own check
    refuses 152.5 afterwards) and an integer is a valid number."""
    if value is None or kind is None:
        return value
    if kind == "boolean" and not isinstance(value, bool):
        raise ValueError("must be true or false")
    if kind in ("integer", "number") and not _is_json_number(value):
        raise ValueError(
            f"must be {'an integer' if kind == 'integer' else 'a number'}, not {type(value).__name__}"
        )
    return value


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, str_max_length=1024, frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _types_as_json_schema_says(cls, value, info: ValidationInfo):
        """Booleans, integers and numbers are exactly what the params schema declares: the API
        stores what it was sent, so `{"seed": false}` must not become seed 0."""
        field = cls.model_fields.get(info.field_name or "")
        return value if field is None else strict_json_value(_json_kind(field.annotation), value)


def exactly_one_of(*names: str) -> dict:
    """JSON Schema for "exactly one of these fields, not null": what `_one_source` checks, said in
    the params schema so a request it calls valid is one the API accepts. No two of them; and
    when none of the others is given, the last. (`not` and `if`, not a `oneOf` of the object,
    which client generators turn into a union of classes instead of one params class.)"""
    pairs = [{"allOf": [_given(a), _given(b)]} for i, a in enumerate(names) for b in names[i + 1 :]]
    others = [_given(name) for name in names[:-1]]
    return {"not": {"anyOf": pairs}, "if": {"not": {"anyOf": others}}, "then": _given(names[-1])}


def _given(name: str) -> dict:
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


SINGLE_SOURCES = ("input", "input_url", "video_id")
MULTI_SOURCES = ("inputs", "input_urls", "video_ids")


def given_sources(get) -> list:
    """The source list a multi-input type was given (`get(name)` reads a field), else []."""
    return next((get(name) for name in MULTI_SOURCES if get(name) is not None), [])


def _source_url_shape(url: str, what: str) -> str:
    """An input URL's shape only; its addresses are checked at submission and again at each
    connection (media.sources.guard)."""
    try:
        check_source_shape(url, allow_http=fetch_allows_http())
    except UnsafeSourceURL as exc:
        raise ValueError(f"{what} {exc}") from None
    return url


def _exactly_one_source(model, names: tuple[str, ...], choices: str):
    """`model` when exactly one of its source fields `names` is given; else an error named after the
    extra source when there are several, or the first name when there is none."""
    given = [name for name in names if getattr(model, name) is not None]
    if len(given) != 1:
        field = next((name for name in given if name != names[0]), names[0]) if given else names[0]
        raise PydanticCustomError("one_source", f"give exactly one of {choices}", {"field": field})
    return model


class SingleInput(Params):
    """Types that read one video: exactly one of `input` (media-root-relative path), `input_url`
    (fetched by the dispatch stage, media.sources) or `video_id`."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("input", "input_url", "video_id"))

    input: MediaPath | None = Field(None, description="Path relative to the media root")
    input_url: SourceURL | None = Field(
        None,
        max_length=MAX_URL_CHARS,
        description="https:// URL (http:// when JETENCODE_FETCH_ALLOW_HTTP is on) or s3://bucket/key, "
        "fetched into the source cache before the job runs",
    )
    video_id: uuid.UUID | None = Field(None, description="A media-library asset")

    @field_validator("input")
    @classmethod
    def _input_is_safe(cls, value: str | None) -> str | None:
        return None if value is None else _check_media_file(value, "input")

    @field_validator("input_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        return None if value is None else _source_url_shape(value, "input_url")

    @model_validator(mode="after")
    def _one_source(self):
        return _exactly_one_source(
            self, SINGLE_SOURCES, "input (a path under the media root), input_url or video_id"
        )


class MultiInput(Params):
    """Types that read several videos: exactly one of `inputs` (media-root-relative paths),
    `input_urls` (each fetched by the dispatch stage, media.sources) or `video_ids`."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("inputs", "input_urls", "video_ids"))

    inputs: list[MediaPath] | None = Field(
        None, max_length=MAX_INPUTS, description="Paths relative to the media root"
    )
    input_urls: list[SourceURLItem] | None = Field(
        None,
        max_length=MAX_INPUTS,
        description="https:// URLs (http:// when JETENCODE_FETCH_ALLOW_HTTP is on) or s3://bucket/key, "
        "each fetched into the source cache before the job runs",
    )
    video_ids: list[uuid.UUID] | None = Field(None, max_length=MAX_INPUTS)

    @field_validator("inputs")
    @classmethod
    def _inputs_are_safe(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        check_repeats(value, "inputs")
        return _check_media_files(value, [f"inputs[{index}]" for index in range(len(value))])

    @field_validator("input_urls")
    @classmethod
    def _urls_shape(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        check_repeats(value, "input_urls")
        return [_source_url_shape(url, f"input_urls[{index}]") for index, url in enumerate(value)]

    @field_validator("video_ids")
    @classmethod
    def _ids_repeat_at_most(cls, value: list[uuid.UUID] | None) -> list[uuid.UUID] | None:
        return None if value is None else check_repeats(value, "video_ids")

    @model_validator(mode="after")
    def _one_source(self):
        return _exactly_one_source(
            self, MULTI_SOURCES, "inputs (paths under the media root), input_urls or video_ids"
        )

    def source_count(self) -> int:
        return len(given_sources(lambda name: getattr(self, name)))


class EncodeOptions(Params):
    preset: Preset = "veryfast"
    crf: Crf = 23
    audio_bitrate_kbps: AudioKbps = 128


# --- noop -------------------------------------------------------------------------------------


class NoopParams(Params):
    seconds: float = Field(0.0, ge=0, le=3600, description="How long to sleep")
    fail_attempts: int = Field(0, ge=0, le=20, description="Fail attempts 1..N, then succeed")
    children: int = Field(0, ge=0, le=100, description="Spawn this many noop child stages")


# --- measured quality and codecs (issue 16) -----------------------------------------------------

QualityMetric = Literal["vmaf", "psnr", "ssim"]
Codec = Literal["h264", "hevc", "av1"]


def _needs_vmaf(value, info: ValidationInfo, name: str):
    if value is not None and "vmaf" not in (info.data.get("quality_metrics") or []):
        raise ValueError(f'{name} needs "vmaf" in quality_metrics')
    return value


class QualityOptions(Params):
    """Measuring each output against its source (media/quality.py)."""

    quality_metrics: list[QualityMetric] = Field(
        ["vmaf"],  # pydantic copies it per instance; a plain default shows in the schema and the form
        max_length=3,
        description='Metrics measured on each output: "vmaf", "psnr", "ssim"; [] turns measuring off',
    )
    min_vmaf: float | None = Field(
        None, ge=0, le=100, description="Quality gate: an output whose mean VMAF is below this fails the job"
    )
    vmaf_subsample: int | None = Field(
        None, ge=1, le=250, description="Score every Nth frame; default chosen from the frame count"
    )

    @field_validator("quality_metrics")
    @classmethod
    def _distinct_metrics(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("quality_metrics must not repeat a metric")
        return value

    @field_validator("min_vmaf")
    @classmethod
    def _gate_needs_vmaf(cls, value, info: ValidationInfo):
        return _needs_vmaf(value, info, "min_vmaf")


# --- the split (issue 33) ---------------------------------------------------------------------

SplitMode = Literal["off", "chunks", "auto"]
SPLIT_TYPES = ("transcode", "reencode_streaming")  # take `split` and `chunk_seconds`
SPLIT_NOT_YET: tuple[str, ...] = ()  # types that take the params but cannot split yet ("chunks": 422)


class SplitOptions(Params):
    """Split-and-stitch: the encode runs as chunks on any worker of the farm (workers/stages/split.py)."""

    split: SplitMode = Field(
        "auto",
        description='"chunks": encode in chunks on any free slot of the farm, then stitch; "off": one '
        'worker encodes the whole source; "auto": chunks when the source is at least '
        "JETENCODE_SPLIT_MIN_SECONDS long",
    )
    chunk_seconds: float = Field(30.0, ge=2, le=600, description="Target chunk length in seconds")


# --- transcode --------------------------------------------------------------------------------


class Rendition(Params):
    height: int = Field(
        ge=144, le=4320, description="Lines of the shorter side: 720 means 720p, landscape or portrait"
    )
    video_bitrate_kbps: VideoKbps | None = Field(None, description="Peak video bitrate; default by height")
    codec: Codec | None = Field(None, description="h264, hevc or av1; default the job's codec")

    @field_validator("height")
    @classmethod
    def _even(cls, value: int) -> int:
        if value % 2:
            raise ValueError("height must be even (H.264 4:2:0 needs even dimensions)")
        return value


class TranscodeParams(EncodeOptions, QualityOptions, SplitOptions, SingleInput):
    codec: Codec = Field("h264", description="Video codec of rungs that do not name their own")
    target_vmaf: float | None = Field(
        None,
        ge=50,
        le=99,
        description="Per-title ladder: each rung's CRF is searched on samples to reach this VMAF",
    )
    ladder: list[Rendition] | None = Field(
        None,
        min_length=1,
        max_length=8,
        description="Renditions; default 1080/720/480/360 capped at the source resolution",
    )
    segment_seconds: float = Field(4.0, ge=1, le=30, description="HLS segment length (keyframe interval)")
    thumbnail_width: Width = 640
    thumbnail_at: Seconds | None = Field(None, description="Thumbnail position; default 25% of the duration")

    @field_validator("ladder")
    @classmethod
    def _unique_heights(cls, value: list[Rendition] | None) -> list[Rendition] | None:
        if value is not None and len({r.height for r in value}) != len(value):
            raise ValueError("ladder heights must be distinct")
        return value

    @field_validator("target_vmaf")
    @classmethod
    def _target_needs_vmaf(cls, value, info: ValidationInfo):
        return _needs_vmaf(value, info, "target_vmaf")

    def rung_codecs(self) -> list[tuple[str, str]]:
        """(field, codec) of every codec this job encodes: `codec`, and each rung's own."""
        used = [("codec", self.codec)]
        for index, rung in enumerate(self.ladder or []):
            if rung.codec is not None:
                used.append((f"ladder.{index}.codec", rung.codec))
        return used


# --- library ------------------------------------------------------------------------------------


class ScanParams(Params):
    directory: MediaPath = Field(
        "videos", description="Directory under the media root to walk", validate_default=True
    )
    recursive: bool = True
    skip_existing: bool = Field(True, description="Do not re-validate files that already have a valid asset")

    @field_validator("directory")
    @classmethod
    def _dir_is_safe(cls, value: str) -> str:
        return _check_media_dir(value, "directory")


class PublicScanParams(ScanParams):
    directory: MediaPath = Field(
        "public", description="Directory under the media root to walk", validate_default=True
    )


def _library_file_only(value: str | None, job_type: str) -> str | None:
    # These types keep a library record of the file they read: a cached download is not one.
    if value is not None:
        raise ValueError(
            f"{job_type} works on files of the media root: give input or video_id, not input_url"
        )
    return value


class LibraryFileInput(SingleInput):
    """Types that keep a library record of the file they read: `input` or `video_id`, no input_url
    (left out of their schema, and refused with a message that says why)."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("input", "video_id"))

    input_url: SkipJsonSchema[str | None] = None


class ValidateParams(LibraryFileInput):
    @field_validator("input_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        return _library_file_only(value, "validate")


class MoveToLibraryParams(LibraryFileInput):
    target_directory: MediaPath = Field(
        "videos", description="Directory under the media root to move the file into"
    )
    overwrite: bool = False

    @field_validator("input")
    @classmethod
    def _input_is_safe(cls, value: str | None) -> str | None:
        # Same checks as other inputs except existence: a retried move finds its input already
        # moved, and must be able to recognise that and finish (the handler checks existence).
        if value is None:
            return None
        try:
            resolve_media_path(value, what="input", kind="file")
        except UnsafePathError as exc:
            raise ValueError(str(exc)) from None
        return check_relative(value, what="input").as_posix()

    @field_validator("input_url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        return _library_file_only(value, "move_to_library")

    @field_validator("target_directory")
    @classmethod
    def _target_is_safe(cls, value: str) -> str:
        return _check_target_dir(value, "target_directory")


# --- encode ---------------------------------------------------------------------------------------


class ReencodeStreamingParams(EncodeOptions, QualityOptions, SplitOptions, SingleInput):
    preset: Preset = "medium"
    target_bitrate_kbps: VideoKbps = Field(2000, description="maxrate; bufsize is twice this")
    max_height: int | None = Field(
        None, ge=144, le=4320, description="Scale down so the shorter side is at most this"
    )
    library_directory: MediaPath = Field("playback", description="Library directory for the encoded asset")

    @field_validator("library_directory")
    @classmethod
    def _library_dir_is_safe(cls, value: str) -> str:
        return _check_target_dir(value, "library_directory")


class ThumbnailParams(SingleInput):
    timestamp: Seconds | None = Field(None, description="Seconds into the video; default 25% of the duration")
    width: Width = 640
    quality: int = Field(3, ge=2, le=31, description="JPEG qscale: 2 is best, 31 worst")


# --- compile ----------------------------------------------------------------------------------------


class CompileOutput(EncodeOptions):
    fps: int = Field(30, ge=1, le=120)


class CompileRandomParams(CompileOutput):
    count: int = Field(5, ge=1, le=50)
    min_duration: Seconds = 0.0
    max_duration: Seconds = 3600.0
    orientation: Orientation = "any"
    directory: MediaPath | None = Field(None, description="Only assets of this library directory")
    seed: int | None = Field(None, ge=0, le=2**31 - 1, description="Make the random choice repeatable")
    width: Width | None = Field(None, description="Output width; default by orientation (1280 or 720)")
    height: Height | None = Field(None, description="Output height; default by orientation (720 or 1280)")

    @field_validator("directory")
    @classmethod
    def _directory_shape(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check_relative(value, what="directory").as_posix()
        except UnsafePathError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _range(self):
        if self.min_duration > self.max_duration:
            raise ValueError("min_duration must not exceed max_duration")
        return self


def sources_counted(low: int, high: int | None = None):
    """A multi-input type's json_schema_extra: exactly one source field (MultiInput's), and as many
    items as the type takes (its `source_count` check), declared on each source list so a request
    the schema calls valid is one the API accepts."""

    def extra(schema: dict, cls) -> None:
        schema.update(exactly_one_of(*MULTI_SOURCES))
        for name in MULTI_SOURCES:
            for branch in schema["properties"][name].get("anyOf", []):
                if branch.get("type") == "array":
                    branch["minItems"] = low
                    if high is not None:
                        branch["maxItems"] = high

    return extra


class CompileQuadParams(CompileOutput, MultiInput):
    model_config = ConfigDict(json_schema_extra=sources_counted(4, 4))

    cell_width: Width = 640
    cell_height: Height = 360
    duration: Literal["shortest", "longest"] = "shortest"
    audio: Literal["mix", "first", "none"] = "mix"

    @field_validator("cell_width", "cell_height")
    @classmethod
    def _grid_fits(cls, value: int, info: ValidationInfo) -> int:
        return check_grid_side(value, info, fixed_columns=2)

    @model_validator(mode="after")
    def _four(self):
        if self.source_count() != 4:
            raise ValueError("compile_quad takes exactly 4 videos")
        return self


class CompileMegaParams(CompileOutput, MultiInput):
    model_config = ConfigDict(json_schema_extra=sources_counted(2))

    layout: Literal["grid", "concat"] = "grid"
    columns: int | None = Field(None, ge=1, le=8, description="Grid columns; default ceil(sqrt(n))")
    cell_width: Width = 320
    cell_height: Height = 180
    width: Width = Field(1280, description="Concat output width")
    height: Height = Field(720, description="Concat output height")
    duration: Literal["shortest", "longest"] = "shortest"
    audio: Literal["mix", "first", "none"] = "mix"

    @field_validator("cell_width", "cell_height")
    @classmethod
    def _grid_fits(cls, value: int, info: ValidationInfo) -> int:
        return check_grid_side(value, info)

    @model_validator(mode="after")
    def _count(self):
        if self.source_count() < 2:
            raise ValueError("compile_mega takes at least 2 videos")
        return self


class CompileGifParams(SingleInput):
    start: Seconds = 0.0
    duration: float = Field(5.0, gt=0, le=60)
    width: int = Field(480, ge=16, le=1920)
    fps: int = Field(12, ge=1, le=50)
    max_colors: int = Field(256, ge=2, le=256)
    dither: Literal["sierra2_4a", "bayer", "floyd_steinberg", "none"] = "sierra2_4a"


# --- analysis -------------------------------------------------------------------------------------


class SceneExtractParams(SingleInput):
    threshold: float = Field(
        0.3, ge=0.01, le=1.0, description="Scene-change score (0..1) that starts a new scene"
    )
    min_scene_seconds: float = Field(1.0, ge=0, le=600)
    max_scenes: int = Field(100, ge=1, le=1000)
    thumbnail_width: int = Field(320, ge=16, le=1920)


class TimeRange(Params):
    start: Seconds
    end: Seconds

    @model_validator(mode="after")
    def _ordered(self):
        if self.end <= self.start:
            raise ValueError("end must be after start")
        if self.end - self.start > 3600:
            raise ValueError("a range may be at most 3600 seconds long")
        return self


class ClipGenerateParams(EncodeOptions, SingleInput):
    ranges: list[TimeRange] | None = Field(
        None,
        min_length=1,
        max_length=100,
        description="Explicit ranges; default the asset's stored scenes, else detected scenes",
    )
    threshold: float = Field(0.3, ge=0.01, le=1.0, description="Scene threshold when scenes are detected")
    min_clip_seconds: float = Field(1.0, ge=0, le=600, description="Skip detected scenes shorter than this")
    max_clips: int = Field(20, ge=1, le=100)

    @field_validator("ranges")
    @classmethod
    def _clips_within_output_length(cls, value: list[TimeRange] | None) -> list[TimeRange] | None:
        total = sum(r.end - r.start for r in value or [])
        if total > MAX_OUTPUT_SECONDS:
            raise ValueError(
                f"the ranges add up to {total:.0f} s of clips; at most {MAX_OUTPUT_SECONDS:.0f} s"
            )
        return value


class SignalWeights(Params):
    scene: float = Field(1.0, ge=0, le=10)
    motion: float = Field(1.0, ge=0, le=10)
    loudness: float = Field(1.0, ge=0, le=10)

    @model_validator(mode="after")
    def _some(self):
        if self.scene + self.motion + self.loudness <= 0:
            raise ValueError("at least one weight must be positive")
        return self


class SummaryParams(EncodeOptions, SingleInput):
    target_seconds: float = Field(30.0, ge=1, le=3600)
    segment_seconds: float = Field(3.0, ge=0.5, le=60)
    weights: SignalWeights = Field(default_factory=SignalWeights)
    threshold: float = Field(0.3, ge=0.01, le=1.0, description="Scene-change score counted as a cut")

    @model_validator(mode="after")
    def _segment_count(self):
        if self.target_seconds / self.segment_seconds > 100:
            raise ValueError("target_seconds / segment_seconds may be at most 100 segments")
        return self


class HighlightParams(SummaryParams):
    pass


class DigestParams(SummaryParams):
    target_seconds: float = Field(60.0, ge=1, le=3600)
    segment_seconds: float = Field(5.0, ge=0.5, le=60)


class TagParams(SingleInput):
    threshold: float = Field(0.3, ge=0.01, le=1.0, description="Scene-change score counted as a cut")
