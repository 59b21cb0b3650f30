"""The VMAF log is read as a stream within a fixed memory bound (issue 37, item 4).

`vmaf_subsample: 1` on a ten-hour 60 fps source is a log of two million frame objects; parse_log
holds one frame and a bounded sample, never the file. Measured with tracemalloc on a log of
150,000 frames (~25 MB): the peak stays within a few MiB, while json.loads of the same file needs
many times the file's size.
"""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from media import quality

FRAMES = 150_000


def _write_log(path, frames: int, seed: int = 7) -> list[float]:
    """A libvmaf-shaped JSON log (version, frames with metrics, pooled metrics), written frame by
    frame; returns the VMAF scores written, for the exact figures."""
    rng = random.Random(seed)
    scores = []
    with open(path, "w") as out:
        out.write('{\n  "version": "2.3.0",\n  "fps": 60.0,\n  "frames": [\n')
        for index in range(frames):
            score = round(min(100.0, max(0.0, rng.gauss(85, 6))), 6)
            scores.append(score)
            metrics = {"integer_motion2": 1.25, "psnr_y": 40.5, "float_ssim": 0.987654, "vmaf": score}
            sep = ",\n" if index < frames - 1 else "\n"
            out.write(
                f'    {{\n      "frameNum": {index},\n      "metrics": {json.dumps(metrics, indent=8)}\n    }}{sep}'
            )
        out.write('  ],\n  "pooled_metrics": {"vmaf": {"mean": 87.4}},\n  "aggregate_metrics": {}\n}\n')
    return scores


@pytest.fixture(scope="module")
def long_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("vmaf") / "long.json"
    scores = _write_log(path, FRAMES)
    return path, scores


def test_a_long_log_is_parsed_within_a_fixed_memory_bound(long_log):
    path, scores = long_log
    tracemalloc.start()
    try:
        parsed = quality.parse_log(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size_mib = path.stat().st_size / 2**20
    print(f"log {size_mib:.1f} MiB, {FRAMES} frames: parse_log peak {peak / 2**20:.2f} MiB")
    assert peak < 6 * 2**20, f"parse_log held {peak / 2**20:.1f} MiB for a {size_mib:.0f} MiB log"
    assert parsed.frames == FRAMES and parsed.libvmaf_version == "2.3.0"
    assert parsed.vmaf == pytest.approx(sum(scores) / len(scores), abs=1e-6)  # exact over every frame
    assert parsed.psnr_db == pytest.approx(40.5) and parsed.ssim == pytest.approx(0.987654)
    # Past MAX_PERCENTILE_FRAMES the 5th percentile comes from a uniform sample: close to the exact one.
    assert parsed.vmaf_p5 == pytest.approx(quality.percentile(scores, 5), abs=0.1)


def test_the_figures_are_exact_below_the_sample_size(tmp_path):
    path = tmp_path / "short.json"
    scores = _write_log(path, 5_000, seed=3)
    parsed = quality.parse_log(path)
    assert parsed.vmaf_p5 == pytest.approx(quality.percentile(scores, 5), abs=1e-9)
    assert parsed.frames == 5_000


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"version": "2.3.0", "frames": []}', "no frames"),
        ('{"version": "2.3.0"}', "no frames"),
        ('{"version": "2.3.0", "frames": [{"metrics": {"vmaf": 90.0}}, {"metrics": {"vm', "truncated"),
    ],
)
def test_empty_or_truncated_logs_are_errors(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        quality.parse_log(path)
