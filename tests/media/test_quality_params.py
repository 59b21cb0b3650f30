"""The quality and codec params through POST /v2/jobs (422s naming the field), and the encoder each
rung gets from a worker's catalog and the job's `hardware` (catalogs given, nothing encoded)."""

from pathlib import Path

import pytest
from django.test import Client

from media.ffmpeg import select_encoder
from scheduler import repository
from tests.kit.web import Api, issue_token
from tests.kit.workers import InProcessWorker

pytestmark = pytest.mark.django_db

NVENC = {
    "encoders": ["libx264", "libx265", "libaom-av1", "h264_nvenc", "hevc_nvenc", "av1_nvenc"],
    "hardware_encoders": ["h264_nvenc", "hevc_nvenc", "av1_nvenc"],
}
CPU_ONLY = {"encoders": ["libx264", "libx265", "libaom-av1"], "hardware_encoders": []}


@pytest.fixture
def api(bob):
    return Api(Client(), issue_token(bob, "operate"))


@pytest.fixture
def video(roots, clips):
    return roots.add(clips.landscape, "videos/a.mp4")


def refused_fields(response) -> dict[str, str]:
    assert response.status_code == 422, response.content
    body = response.json()
    errors = {e["field"]: e["message"] for e in body["errors"]}
    assert all(field in body["detail"] for field in errors)
    return errors


@pytest.mark.parametrize(
    "params, field, message",
    [
        ({"quality_metrics": ["vmaf", "lpips"]}, "params.quality_metrics.1", "'vmaf', 'psnr' or 'ssim'"),
        ({"quality_metrics": ["vmaf", "vmaf"]}, "params.quality_metrics", "repeat"),
        ({"target_vmaf": 49}, "params.target_vmaf", "greater than or equal to 50"),
        ({"target_vmaf": 99.5}, "params.target_vmaf", "less than or equal to 99"),
        ({"min_vmaf": 101}, "params.min_vmaf", "less than or equal to 100"),
        ({"quality_metrics": ["psnr"], "min_vmaf": 80}, "params.min_vmaf", 'needs "vmaf" in quality_metrics'),
        ({"quality_metrics": [], "target_vmaf": 90}, "params.target_vmaf", 'needs "vmaf"'),
        ({"ladder": [{"height": 180, "codec": "vp9"}]}, "params.ladder.0.codec", "'h264', 'hevc' or 'av1'"),
        ({"codec": "h266"}, "params.codec", "'h264', 'hevc' or 'av1'"),
        ({"vmaf_subsample": 0}, "params.vmaf_subsample", "greater than or equal to 1"),
    ],
)
def test_bad_quality_params_are_a_422_naming_the_field(api, video, params, field, message):
    errors = refused_fields(api.post("/v2/jobs", {"type": "transcode", "params": {"input": video, **params}}))
    assert list(errors) == [field] and message in errors[field]


def test_reencode_streaming_takes_the_same_quality_params(api, video):
    errors = refused_fields(
        api.post(
            "/v2/jobs",
            {
                "type": "reencode_streaming",
                "params": {"input": video, "quality_metrics": ["ssim"], "min_vmaf": 1},
            },
        )
    )
    assert list(errors) == ["params.min_vmaf"]


def _live_worker(uid: str, capabilities: dict) -> None:
    import os
    import uuid

    repository.register_worker(
        repository.WorkerRegistration(
            uid=uid,
            session_id=uuid.uuid4(),
            hostname="test",
            pid=os.getpid(),
            version="test",
            concurrency=2,
            background_slots=1,
            category_limits={"cpu": 2, "gpu_encode": 1},
            vram_total_mb=8000,
            capabilities=capabilities,
            workspace="/tmp",
        )
    )


def test_a_codec_no_live_worker_can_encode_on_a_gpu_is_a_422_naming_it(api, video):
    _live_worker("cpu-box", CPU_ONLY)
    body = {
        "type": "transcode",
        "hardware": "gpu",
        "params": {
            "input": video,
            "ladder": [{"height": 180}, {"height": 144, "codec": "av1"}],
            "codec": "hevc",
        },
    }
    errors = refused_fields(api.post("/v2/jobs", body))
    assert set(errors) == {"params.codec", "params.ladder.1.codec"}
    assert "no live worker has a confirmed av1 hardware encoder" in errors["params.ladder.1.codec"]
    # The same job on the CPU, or H.264 on the GPU (libx264 on the GPU reservation, DECISIONS 8), is fine.
    assert api.post("/v2/jobs", {**body, "hardware": "auto"}).status_code == 201
    assert api.post("/v2/jobs", {**body, "params": {"input": video}}).status_code == 201
    # Once a worker with NVENC for both is up, the GPU job is accepted.
    _live_worker("gpu-box", NVENC)
    assert api.post("/v2/jobs", body).status_code == 201


def test_encoders_follow_the_catalog_and_hardware():
    assert select_encoder("hevc", NVENC, "auto") == ("hevc_nvenc", True)
    assert select_encoder("av1", NVENC, "gpu") == ("av1_nvenc", True)
    assert select_encoder("av1", NVENC, "cpu") == ("libaom-av1", False)
    assert select_encoder("hevc", CPU_ONLY, "gpu") == ("libx265", False)
    assert select_encoder("av1", {**CPU_ONLY, "encoders": [*CPU_ONLY["encoders"], "libsvtav1"]}, "auto") == (
        "libsvtav1",
        False,
    )
    # Listed but not confirmed by a test encode: never chosen.
    unconfirmed = {"encoders": ["libx265", "hevc_vaapi"], "hardware_encoders": []}
    assert select_encoder("hevc", unconfirmed, "auto") == ("libx265", False)
    assert select_encoder("av1", {"encoders": ["libx264"], "hardware_encoders": []}, "auto") == (None, False)


def test_each_rung_gets_its_codecs_encoder_and_resource_from_the_dispatching_worker(db, roots, clips):
    rel = roots.add(clips.landscape, "a.mp4")
    params = {"input": rel, "ladder": [{"height": 180, "codec": "hevc"}, {"height": 144, "codec": "av1"}]}
    gpu_worker = InProcessWorker(
        "gpu-worker", capabilities=NVENC, category_limits={"cpu": 4, "gpu_encode": 1}
    )
    dispatch = gpu_worker.stage_of("transcode", params)
    dispatch.execute()
    hevc, av1 = dispatch.children[:2]
    assert (hevc.payload["codec"], hevc.payload["encoder"], hevc.resource_category) == (
        "hevc",
        "hevc_nvenc",
        "gpu_encode",
    )
    assert (av1.payload["encoder"], av1.resource_category, av1.vram_mb) == ("av1_nvenc", "gpu_encode", 4000)
    assert any("hevc (hevc_nvenc)" in line for line in dispatch.logs())

    on_cpu = InProcessWorker("gpu-worker-2", capabilities=NVENC).stage_of("transcode", params, hardware="cpu")
    on_cpu.execute()
    hevc, av1 = on_cpu.children[:2]
    assert (hevc.payload["encoder"], hevc.resource_category, hevc.vram_mb) == ("libx265", "cpu", 0)
    assert (av1.payload["encoder"], av1.resource_category, av1.payload["crf"]) == ("libaom-av1", "cpu", 32)


def test_codec_strings_come_from_the_decoder_configuration_records():
    from media.hls import av1_codec_string, hevc_codec_string

    # hvcC of libx265 Main at level 2 (what the 320x180 test rendition carries).
    hvcc = bytes.fromhex("0101600000009000000000003cf000fc")
    assert hevc_codec_string(hvcc) == "hvc1.1.6.L60.90"
    assert (
        hevc_codec_string(bytes.fromhex("01 21 60000000 b00000000000 5d".replace(" ", "")))
        == "hvc1.1.6.H93.B0"
    )
    # av1C: marker/version 0x81, profile 0 level 4 (seq_level_idx 4), tier M, 8-bit 4:2:0.
    assert av1_codec_string(bytes.fromhex("8104 0c00".replace(" ", ""))) == "av01.0.04M.08"
    assert av1_codec_string(bytes.fromhex("81 2c 4c 00".replace(" ", ""))) == "av01.1.12M.10"
    assert hevc_codec_string(b"") == "" and av1_codec_string(b"\x01\x02\x03") == ""


def test_hevc_and_av1_encodings_build_their_own_arguments():
    from media import commands

    x265 = commands.VideoEncoding("libx265", "veryfast", 28, 800, 1600, 2).output_args()
    assert x265[:6] == ["-c:v", "libx265", "-preset", "veryfast", "-crf", "28"]
    assert "scenecut=0:open-gop=0" in x265[x265.index("-x265-params") + 1] and "-forced-idr" in x265
    assert x265[-2:] == ["-tag:v", "hvc1"] and "-maxrate" in x265
    aom = commands.VideoEncoding("libaom-av1", "veryfast", 40, 800).output_args()
    assert aom[aom.index("-cpu-used") + 1] == "7" and aom[aom.index("-b:v") + 1] == "800k"
    assert commands.VideoEncoding("hevc_vaapi").filter_tail() == "format=nv12,hwupload"
    assert commands.VideoEncoding("av1_nvenc", "medium", 30).output_args()[:4] == [
        "-c:v",
        "av1_nvenc",
        "-preset",
        "p4",
    ]
    with pytest.raises(ValueError, match="0..51"):
        commands.VideoEncoding("libx265", crf=60)
    assert commands.VideoEncoding("libaom-av1", crf=60).crf == 60  # AV1's scale is 0..63
    fmp4 = commands.hls_package(Path("/a.mp4"), Path("/out"), segment_seconds=2, fmp4=True)
    assert fmp4[-6:] == ["fmp4", "-hls_fmp4_init_filename", "init.mp4", "-hls_segment_filename"] + [
        "/out/seg_%05d.m4s",
        "/out/index.m3u8",
    ]
