"""Job-type params: validation, error shape, JSON schema, and resource resolution (DECISIONS 8)."""

import uuid

import pytest

from media.jobtypes import (
    JOB_TYPES,
    ParamsError,
    params_json_schema,
    resolve_resource,
    validate_params,
)

MEDIA_TYPES = {
    "transcode",
    "scan",
    "public_scan",
    "validate",
    "reencode_streaming",
    "compile_random",
    "compile_quad",
    "compile_mega",
    "compile_gif",
    "digest_generate",
    "clip_generate",
    "highlight_generate",
    "tag_generation",
    "scene_extract",
    "thumbnail_generate",
    "move_to_library",
}
NVENC = {"encoders": ["libx264", "h264_nvenc"], "hardware_encoders": ["h264_nvenc"]}
CPU_ONLY = {"encoders": ["libx264", "h264_v4l2m2m"], "hardware_encoders": []}


def minimal(job_type: str, roots, clips) -> dict:
    """The smallest valid params for each type."""
    roots.add(clips.landscape, "videos/a.mp4")
    (roots.media / "public").mkdir(exist_ok=True)
    four = [str(uuid.uuid4()) for _ in range(4)]
    return {
        "noop": {},
        "scan": {},
        "public_scan": {},
        "compile_random": {},
        "compile_quad": {"video_ids": four},
        "compile_mega": {"inputs": ["videos/a.mp4", "videos/a.mp4"]},
    }.get(job_type, {"input": "videos/a.mp4"})


def errors_of(job_type, params):
    with pytest.raises(ParamsError) as info:
        validate_params(job_type, params)
    return info.value.errors


def test_registry_has_noop_and_the_sixteen_media_types():
    assert set(JOB_TYPES) == MEDIA_TYPES | {"noop"}
    assert JOB_TYPES["reencode_streaming"].resource_category == "gpu_encode"
    assert JOB_TYPES["reencode_streaming"].vram_mb == 4000
    assert (JOB_TYPES["scene_extract"].resource_category, JOB_TYPES["scene_extract"].vram_mb) == (
        "gpu_ai",
        8000,
    )
    assert (JOB_TYPES["noop"].resource_category, JOB_TYPES["noop"].vram_mb) == ("cpu", 0)
    for jt in JOB_TYPES.values():
        assert jt.stages[0] == jt.name and jt.description


@pytest.mark.parametrize("job_type", sorted(MEDIA_TYPES | {"noop"}))
def test_every_type_accepts_minimal_params_and_fills_defaults(job_type, roots, clips):
    params = validate_params(job_type, minimal(job_type, roots, clips))
    assert isinstance(params, dict)
    # Normalised params validate again to themselves (what the worker does with the stored params).
    assert validate_params(job_type, params) == params
    schema = params_json_schema(job_type)
    assert schema["type"] == "object" and schema.get("additionalProperties") is False


def test_noop_params_have_defaults_and_bounds():
    assert validate_params("noop", {}) == {"seconds": 0.0, "fail_attempts": 0, "children": 0}
    errors = errors_of("noop", {"seconds": -1, "children": 101, "fail_attempts": 21, "bogus": 1})
    assert {e["field"] for e in errors} == {
        "params.seconds",
        "params.children",
        "params.fail_attempts",
        "params.bogus",
    }
    assert all(e["message"] for e in errors)
    assert errors_of("noop", {"seconds": float("inf")})[0]["field"] == "params.seconds"
    assert errors_of("noop", {"seconds": "NaN"})[0]["field"] == "params.seconds"


def test_an_unknown_type_or_non_object_params_are_refused():
    with pytest.raises(ParamsError) as info:
        validate_params("frobnicate", {})
    assert info.value.errors[0]["field"] == "type"
    with pytest.raises(ParamsError) as info:
        validate_params("noop", [1, 2])
    assert info.value.errors == [{"field": "params", "message": "params must be a JSON object"}]


@pytest.mark.parametrize(
    "bad", ["../x.mp4", "/etc/passwd", "http://evil/x.mp4", "concat:a|b", "-y.mp4", "a\x00.mp4"]
)
def test_unsafe_inputs_are_refused_at_submission(bad, roots):
    errors = errors_of("reencode_streaming", {"input": bad})
    assert errors[0]["field"] == "params.input"


def test_input_must_exist_and_exactly_one_source(roots, clips):
    assert "does not exist" in errors_of("thumbnail_generate", {"input": "nope.mp4"})[0]["message"]
    roots.add(clips.landscape, "a.mp4")
    both = errors_of("thumbnail_generate", {"input": "a.mp4", "video_id": str(uuid.uuid4())})
    message = "give exactly one of input (a path under the media root), input_url or video_id"
    assert both == [{"field": "params.video_id", "message": message}]  # the extra source is named
    assert errors_of("thumbnail_generate", {}) == [{"field": "params.input", "message": message}]
    assert errors_of("thumbnail_generate", {"video_id": "not-a-uuid"})[0]["field"] == "params.video_id"


def test_nested_fields_are_named_by_path(roots, clips):
    roots.add(clips.landscape, "a.mp4")
    errors = errors_of(
        "clip_generate", {"input": "a.mp4", "ranges": [{"start": 0, "end": 1}, {"start": 5, "end": 2}]}
    )
    assert errors[0]["field"] == "params.ranges.1"
    assert errors[0]["message"] == "end must be after start"
    errors = errors_of("transcode", {"input": "a.mp4", "ladder": [{"height": 721}]})
    assert errors[0]["field"] == "params.ladder.0.height"
    errors = errors_of("compile_quad", {"inputs": ["a.mp4"] * 3})
    assert "exactly 4" in errors[0]["message"]
    errors = errors_of("compile_quad", {"inputs": ["a.mp4", "a.mp4", "../b.mp4", "a.mp4"]})
    assert errors[0]["field"] == "params.inputs"
    assert "inputs[2]" in errors[0]["message"]


def test_scan_directory_must_be_a_safe_existing_directory(roots):
    (roots.media / "videos").mkdir()
    assert validate_params("scan", {"directory": "videos"})["directory"] == "videos"
    assert errors_of("scan", {"directory": "../"})[0]["field"] == "params.directory"
    assert errors_of("public_scan", {})[0]["field"] == "params.directory"  # media/public is missing


def test_resource_defaults_follow_decision_8():
    # At submission, auto decides nothing yet: the dispatch runs anywhere.
    assert resolve_resource("reencode_streaming", "auto").category == "cpu"
    gpu = resolve_resource("reencode_streaming", "gpu")
    assert (gpu.category, gpu.vram_mb, gpu.use_gpu) == ("gpu_encode", 4000, True)
    # In the dispatch: a worker with NVENC uses it and the GPU default; without, libx264 on cpu.
    with_gpu = resolve_resource("reencode_streaming", "auto", worker_catalog=NVENC)
    assert (with_gpu.category, with_gpu.vram_mb, with_gpu.encoder) == ("gpu_encode", 4000, "h264_nvenc")
    without = resolve_resource("reencode_streaming", "auto", worker_catalog=CPU_ONLY)
    assert (without.category, without.vram_mb, without.encoder) == ("cpu", 0, "libx264")
    forced_cpu = resolve_resource("reencode_streaming", "cpu", worker_catalog=NVENC)
    assert (forced_cpu.category, forced_cpu.encoder) == ("cpu", "libx264")
    # Plain-filter analysis is cpu whatever the document's gpu_ai default says.
    assert resolve_resource("scene_extract", "gpu", worker_catalog=NVENC).category == "cpu"
    assert resolve_resource("highlight_generate", "auto", worker_catalog=NVENC).category == "gpu_ai"
    assert resolve_resource("noop", "gpu").category == "cpu"


def test_resource_overrides_apply_and_bad_ones_name_their_field():
    choice = resolve_resource("compile_quad", "auto", "gpu_ai", None)
    assert (choice.category, choice.vram_mb, choice.use_gpu) == ("gpu_ai", 6000, True)
    assert resolve_resource("compile_quad", "auto", "gpu_encode", 1234).vram_mb == 1234
    assert resolve_resource("compile_quad", "auto", "gpu_encode", None).vram_mb == 4000
    assert resolve_resource("compile_quad", "gpu", "cpu", None).category == "cpu"
    assert (
        resolve_resource("noop", "auto", "gpu_encode", 1000).category == "gpu_encode"
    )  # operators may force it
    for args, field in [
        (("auto", "tpu", None), "resource_category"),
        (("sometimes", None, None), "hardware"),
        (("auto", "gpu_ai", -1), "vram_mb"),
        (("auto", "cpu", 100), "vram_mb"),
        (("auto", None, True), "vram_mb"),
    ]:
        with pytest.raises(ParamsError) as info:
            resolve_resource("transcode", *args)
        assert info.value.errors[0]["field"] == field
