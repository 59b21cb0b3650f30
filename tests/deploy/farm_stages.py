"""A stage for the multi-host test, loaded by workers through JETENCODE_EXTRA_STAGE_MODULES.

`farm_encode` runs a real FFmpeg for a predictable wall-clock time (`-re` reads a generated test
pattern at its native rate), reports progress from `-progress pipe:1`, publishes the encoded file
and one `noop` child. The job's `marker` param appears in FFmpeg's argv so the test can find the
process with psutil and tell whose it is by its parent pid.
"""

from __future__ import annotations

from media.ffmpeg import ffmpeg_path
from workers.stages.base import ChildSpec, PublishSpec, StageContext, stage

OUTPUT_NAME = "farm.mp4"


@stage("farm_encode")
def farm_encode(ctx: StageContext) -> dict:
    seconds = float(ctx.job_params.get("seconds", 20))
    marker = str(ctx.job_params["marker"])
    partial = ctx.workspace / f"{OUTPUT_NAME}.partial"
    argv = [
        ffmpeg_path(),
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-re",
        "-f",
        "lavfi",
        "-i",
        f"testsrc2=size=64x36:rate=10:duration={seconds:g}",
        "-metadata",
        f"comment={marker}",
        "-c:v",
        "mpeg4",
        "-f",
        "mp4",
        "-progress",
        "pipe:1",
        str(partial),
    ]

    def on_line(line: str) -> None:
        key, _, value = line.partition("=")
        if key == "out_time_us" and value.strip().isdigit():
            ctx.progress(min(99.0, int(value) / 1e6 / seconds * 100))

    done = ctx.run(argv, on_stdout_line=on_line, stall_seconds=30)
    if done.returncode != 0:
        raise RuntimeError(f"ffmpeg exited {done.returncode}: {done.stderr[-500:]}")
    final = partial.with_name(OUTPUT_NAME)
    partial.rename(final)
    ctx.publish_file(PublishSpec(final, OUTPUT_NAME, kind="video"))
    ctx.spawn_child(ChildSpec("noop", {"seconds": 0}))
    return {"seconds": seconds}
