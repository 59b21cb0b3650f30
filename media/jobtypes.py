"""The registry of job types: params schema, resource defaults, stages, and resource resolution.

`JOB_TYPES` is the single list the API, the dashboard and the worker consult. Resource defaults
come from the media document's table; DECISIONS 8 refines them: those defaults describe a stage
that *uses a GPU* (an encoder or a model). The same stage on libx264 or on plain FFmpeg filters is
`cpu` with 0 VRAM. `resolve_resource` is the one place that decision is made.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError

from media import params as p
from media.ffmpeg import preferred_h264_hardware_encoder
from scheduler.constants import HARDWARE_CHOICES, MAX_VRAM_MB, RESOURCE_CATEGORIES

# VRAM assumed for a category an operator forces onto a type whose own default is another category.
CATEGORY_DEFAULT_VRAM = {"cpu": 0, "gpu_encode": 2000, "gpu_ai": 6000}


class ParamsError(Exception):
    """Invalid job input. `.errors` is `[{"field": "params.<name>", "message": "..."}]` (DECISIONS 14)."""

    def __init__(self, errors: list[dict[str, str]]):
        self.errors = errors
        fields = ", ".join(dict.fromkeys(e["field"] for e in errors))
        super().__init__(f"invalid {fields}" if fields else "invalid params")


@dataclass(frozen=True)
class JobType:
    name: str
    description: str
    params_model: type[p.Params]
    resource_category: str  # default for the stage that can use a GPU
    vram_mb: int
    gpu_path: bool  # has a stage that can use a hardware encoder
    stages: tuple[str, ...]  # task types, dispatch first (documentation and dashboards)
    outputs: str
    pool: str = "media"

    def summary(self) -> dict[str, Any]:
        """A JSON-able description for the API's job-type listing and the dashboard form."""
        return {
            "name": self.name,
            "description": self.description,
            "resource_category": self.resource_category,
            "vram_mb": self.vram_mb,
            "gpu_path": self.gpu_path,
            "stages": list(self.stages),
            "outputs": self.outputs,
            "params_schema": self.params_model.model_json_schema(),
        }


def _t(name, description, model, category, vram, gpu_path, stages, outputs) -> JobType:
    return JobType(name, description, model, category, vram, gpu_path, tuple(stages), outputs)


JOB_TYPES: dict[str, JobType] = {
    jt.name: jt
    for jt in [
        _t(
            "noop",
            "Sleeps, optionally fails its first attempts and spawns children: a scheduler test job.",
            p.NoopParams,
            "cpu",
            0,
            False,
            ["noop"],
            "none",
        ),
        _t(
            "transcode",
            "Adaptive-bitrate ladder (H.264, HEVC or AV1 + AAC) packaged as HLS with a master playlist, "
            "plus a thumbnail; each rendition's VMAF/PSNR/SSIM measured (quality.json).",
            p.TranscodeParams,
            "gpu_encode",
            4000,
            True,
            [
                "transcode",
                "transcode.rendition",
                "transcode.thumbnail",
                "transcode.quality",
                "transcode.package",
                "transcode.upload",
            ],
            "renditions/<name>.mp4, hls/master.m3u8, hls/<name>/index.m3u8 + segments, thumbnail.jpg, "
            "quality.json",
        ),
        _t(
            "scan",
            "Walk a directory under the media root, create assets for new videos, validate each.",
            p.ScanParams,
            "cpu",
            0,
            False,
            ["scan", "validate"],
            "media-library assets",
        ),
        _t(
            "public_scan",
            "Scan the public gallery directory (same as scan, default directory 'public').",
            p.PublicScanParams,
            "cpu",
            0,
            False,
            ["public_scan", "validate"],
            "media-library assets",
        ),
        _t(
            "validate",
            "Probe a video and store its metadata on its asset; mark it valid or invalid.",
            p.ValidateParams,
            "cpu",
            0,
            False,
            ["validate"],
            "asset metadata",
        ),
        _t(
            "reencode_streaming",
            "Re-encode for web playback: H.264 + AAC 128k, +faststart; adds a library asset.",
            p.ReencodeStreamingParams,
            "gpu_encode",
            4000,
            True,
            [
                "reencode_streaming",
                "reencode_streaming.encode",
                "reencode_streaming.quality",
                "library.register",
            ],
            "<stem>.mp4 (faststart), quality.json, and a library asset under library_directory",
        ),
        _t(
            "compile_random",
            "Random selection from the library by orientation and duration, concatenated.",
            p.CompileRandomParams,
            "gpu_encode",
            2000,
            True,
            ["compile_random", "compile_random.render"],
            "compilation.mp4, selection.json",
        ),
        _t(
            "compile_quad",
            "Four videos in a 2x2 grid (xstack).",
            p.CompileQuadParams,
            "gpu_encode",
            4000,
            True,
            ["compile_quad", "compile_quad.render"],
            "quad.mp4",
        ),
        _t(
            "compile_mega",
            "Many videos in a larger grid, or one long concatenation.",
            p.CompileMegaParams,
            "gpu_encode",
            6000,
            True,
            ["compile_mega", "compile_mega.render"],
            "mega.mp4",
        ),
        _t(
            "compile_gif",
            "An animated GIF of a segment (palettegen/paletteuse).",
            p.CompileGifParams,
            "cpu",
            0,
            False,
            ["compile_gif"],
            "clip.gif",
        ),
        _t(
            "digest_generate",
            "A digest covering the whole video: the best-scoring segment of each part, by measured signals.",
            p.DigestParams,
            "gpu_ai",
            8000,
            True,
            ["digest_generate", "digest_generate.analyze", "digest_generate.render"],
            "digest.mp4, segments.json",
        ),
        _t(
            "clip_generate",
            "Cut clips from explicit ranges, the asset's scene list, or detected scenes.",
            p.ClipGenerateParams,
            "gpu_ai",
            6000,
            True,
            ["clip_generate", "clip_generate.detect", "clip_generate.cut"],
            "clips/clip_NNN.mp4",
        ),
        _t(
            "highlight_generate",
            "A highlight reel: the most intense segments by measured signals (scene cuts, motion, loudness).",
            p.HighlightParams,
            "gpu_ai",
            8000,
            True,
            ["highlight_generate", "highlight_generate.analyze", "highlight_generate.render"],
            "highlight.mp4, segments.json",
        ),
        _t(
            "tag_generation",
            "Tags measured from the file (resolution, orientation, duration, audio, scene density, motion); "
            "measured, not learned.",
            p.TagParams,
            "gpu_ai",
            6000,
            False,
            ["tag_generation", "tag_generation.analyze", "library.update"],
            "tags.json (and the asset's tags)",
        ),
        _t(
            "scene_extract",
            "FFmpeg scene-change detection: a scene list with a keyframe image per scene.",
            p.SceneExtractParams,
            "gpu_ai",
            8000,
            False,
            ["scene_extract", "scene_extract.detect", "library.update"],
            "scenes.json, scenes/scene_NNNN.jpg",
        ),
        _t(
            "thumbnail_generate",
            "One JPEG at a timestamp (default 25% of the duration) scaled to a width.",
            p.ThumbnailParams,
            "cpu",
            0,
            False,
            ["thumbnail_generate", "library.update"],
            "thumbnail.jpg",
        ),
        _t(
            "move_to_library",
            "Move a file from an inbox directory to a library directory, updating its asset.",
            p.MoveToLibraryParams,
            "cpu",
            0,
            False,
            ["move_to_library"],
            "the moved file and its asset",
        ),
    ]
}


def _unknown_type(job_type: str) -> ParamsError:
    return ParamsError(
        [
            {
                "field": "type",
                "message": f"unknown job type {job_type!r}; expected one of: " + ", ".join(sorted(JOB_TYPES)),
            }
        ]
    )


def get_job_type(job_type: str) -> JobType:
    try:
        return JOB_TYPES[job_type]
    except (KeyError, TypeError):
        raise _unknown_type(job_type) from None


def _field_name(loc: tuple) -> str:
    return ".".join(["params", *(str(part) for part in loc)])


def _location(error: dict) -> tuple:
    """Where an error points; a model-level check may name its field in its context."""
    named = (error.get("ctx") or {}).get("field")
    return error["loc"] or ((named,) if named else ())


def _message(error: dict) -> str:
    message = error.get("msg", "invalid value")
    # pydantic prefixes our own ValueErrors; the prefix says nothing to an API user.
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message


def parse_params(job_type: str, params: dict[str, Any] | None) -> p.Params:
    """Validate and return the params model instance. Raises ParamsError."""
    jt = get_job_type(job_type)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ParamsError([{"field": "params", "message": "params must be a JSON object"}])
    if params.get("split") == "chunks" and job_type in p.SPLIT_NOT_YET:
        raise ParamsError(
            [{"field": "params.split", "message": f"{job_type} cannot split yet; transcode can"}]
        )
    if "split" in params and job_type not in p.SPLIT_TYPES:
        # Said plainly, rather than pydantic's "extra inputs are not permitted".
        raise ParamsError(
            [
                {
                    "field": "params.split",
                    "message": f"{job_type} cannot split; split is for " + " and ".join(p.SPLIT_TYPES),
                }
            ]
        )
    try:
        return jt.params_model.model_validate(params)
    except ValidationError as exc:
        raise ParamsError(
            [{"field": _field_name(_location(e)), "message": _message(e)} for e in exc.errors()]
        ) from None


def validate_params(job_type: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """The normalised params (defaults filled in, JSON-able) to store on the job. Raises ParamsError."""
    return parse_params(job_type, params).model_dump(mode="json", exclude_none=True)


def params_json_schema(job_type: str) -> dict[str, Any]:
    return get_job_type(job_type).params_model.model_json_schema()


@dataclass(frozen=True)
class ResourceChoice:
    category: str
    vram_mb: int
    use_gpu: bool
    encoder: str | None  # H.264 encoder to use; None when no worker catalog was given
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _resource_errors(hardware: str, override_category: str | None, override_vram: int | None) -> list[dict]:
    errors = []
    if hardware not in HARDWARE_CHOICES:
        errors.append({"field": "hardware", "message": f"must be one of {', '.join(HARDWARE_CHOICES)}"})
    if override_category is not None and override_category not in RESOURCE_CATEGORIES:
        errors.append(
            {"field": "resource_category", "message": f"must be one of {', '.join(RESOURCE_CATEGORIES)}"}
        )
    if override_vram is not None and (
        isinstance(override_vram, bool)
        or not isinstance(override_vram, int)
        or not 0 <= override_vram <= MAX_VRAM_MB
    ):
        errors.append({"field": "vram_mb", "message": f"must be an integer between 0 and {MAX_VRAM_MB}"})
    if override_category == "cpu" and override_vram:
        errors.append({"field": "vram_mb", "message": "must be 0 (or omitted) when resource_category is cpu"})
    return errors


def _overridden_resource(
    jt: JobType, category: str, override_vram: int | None, hw_encoder: str | None, cpu_encoder: str | None
) -> ResourceChoice:
    """An explicit resource_category: its VRAM is the override, else the type's (its own category)
    or the category's default."""
    if category == "cpu":
        return ResourceChoice("cpu", 0, False, cpu_encoder, "resource_category override: cpu")
    if override_vram is not None:
        vram = override_vram
    elif category == jt.resource_category:
        vram = jt.vram_mb
    else:
        vram = CATEGORY_DEFAULT_VRAM[category]
    encoder = (hw_encoder or cpu_encoder) if jt.gpu_path else cpu_encoder
    return ResourceChoice(category, vram, True, encoder, f"resource_category override: {category}")


def _resource_for_hardware(
    jt: JobType,
    hardware: str,
    override_vram: int | None,
    hw_encoder: str | None,
    cpu_encoder: str | None,
    worker_catalog: dict[str, Any] | None,
) -> ResourceChoice:
    """No override: what `hardware` (and the worker's catalog, in the dispatch stage) choose."""

    def gpu_default(reason: str) -> ResourceChoice:
        vram = override_vram if override_vram is not None else jt.vram_mb
        return ResourceChoice(jt.resource_category, vram, True, hw_encoder or cpu_encoder, reason)

    if not jt.gpu_path or jt.resource_category == "cpu":
        return ResourceChoice("cpu", 0, False, cpu_encoder, f"{jt.name} runs on FFmpeg filters/CPU only")
    if hardware == "cpu":
        return ResourceChoice("cpu", 0, False, cpu_encoder, "hardware=cpu")
    if hardware == "gpu":
        if worker_catalog is not None and hw_encoder is None:
            return gpu_default(
                "hardware=gpu, but this worker's FFmpeg has no confirmed H.264 hardware encoder; "
                "encoding with libx264 on the GPU reservation"
            )
        return gpu_default("hardware=gpu")
    # auto
    if worker_catalog is None:
        return ResourceChoice("cpu", 0, False, None, "hardware=auto: decided by the dispatching worker")
    if hw_encoder is not None:
        return gpu_default(f"hardware=auto: worker has {hw_encoder}")
    return ResourceChoice("cpu", 0, False, cpu_encoder, "hardware=auto: no hardware encoder on this worker")


def resolve_resource(
    job_type: str,
    hardware: str = "auto",
    override_category: str | None = None,
    override_vram: int | None = None,
    worker_catalog: dict[str, Any] | None = None,
) -> ResourceChoice:
    """Resource category, VRAM and encoder for the GPU-capable stage of a job (DECISIONS 8).

    At submission (no `worker_catalog`) the result is the requirement on the job's dispatch:
    `cpu`/0 unless the job asked for a GPU (hardware="gpu" on a type with a GPU path, or a GPU
    override), in which case only a worker with that capacity may take it. In the dispatch stage
    (with the worker's catalog) it also chooses the encoder:
    - hardware="cpu": always libx264, `cpu`, 0 VRAM;
    - hardware="auto": the type's GPU default when it has a GPU path and the catalog has a
      confirmed H.264 hardware encoder, else `cpu`/0 with libx264;
    - hardware="gpu": the type's GPU default (a hardware encoder if the catalog has one).
    Types whose work is plain FFmpeg filters (no GPU path) are `cpu`/0 whatever `hardware` says.
    An explicit `override_category` (and `override_vram`) wins over all of that.
    Raises ParamsError naming `hardware`, `resource_category` or `vram_mb` for invalid values.
    """
    jt = get_job_type(job_type)
    errors = _resource_errors(hardware, override_category, override_vram)
    if errors:
        raise ParamsError(errors)
    hw_encoder = preferred_h264_hardware_encoder(worker_catalog) if worker_catalog is not None else None
    cpu_encoder = "libx264" if worker_catalog is not None else None
    if override_category is not None:
        return _overridden_resource(jt, override_category, override_vram, hw_encoder, cpu_encoder)
    return _resource_for_hardware(jt, hardware, override_vram, hw_encoder, cpu_encoder, worker_catalog)


# --- codecs on a GPU (issue 16) ---------------------------------------------------------------------


def gpu_codec_errors(
    job_type: str, params: dict[str, Any], hardware: str, catalogs: list[dict]
) -> list[dict]:
    """Errors for `hardware: gpu` jobs asking for HEVC or AV1 that no live worker can encode on a GPU.

    `catalogs` are the capability catalogs of the live workers. With none (no worker up yet) the job
    is accepted and waits for GPU capacity like any GPU job (its waiting_reason says so). H.264 keeps
    DECISIONS 8: libx264 on the GPU reservation when the worker has no H.264 hardware encoder.
    """
    from media.ffmpeg import preferred_hardware_encoder

    if hardware != "gpu" or not catalogs or job_type not in JOB_TYPES:
        return []
    model = get_job_type(job_type).params_model
    if not hasattr(model, "rung_codecs"):
        return []
    try:
        parsed = model.model_validate(params)
    except ValidationError:
        return []
    errors = []
    for field, codec in parsed.rung_codecs():
        if codec == "h264":
            continue
        if not any(preferred_hardware_encoder(codec, catalog) for catalog in catalogs):
            errors.append(
                {
                    "field": f"params.{field}",
                    "message": f"hardware is gpu but no live worker has a confirmed {codec} hardware "
                    "encoder; use hardware auto or cpu (software encoding)",
                }
            )
    return errors
