"""Stage handlers that exist only for tests, loaded by every test worker process by path
(JETENCODE_EXTRA_STAGE_MODULES, set by tests/kit/workers.py). They import only the product.

The job type is the dispatch task's type, so `enqueue("test.subprocess", {...})` runs
`run_subprocess` with the job's params.

- test.subprocess, test.publish, test.crash, test.fanout, test.leaf: the worker tests' stages;
- farm_encode: the multi-host test's (tests/deploy/test_multihost.py): a real FFmpeg for a
  predictable wall-clock time (`-re` reads a generated test pattern at its native rate), progress
  from `-progress pipe:1`, the encoded file published and one `noop` child. The job's `marker`
  param appears in FFmpeg's argv so the test can find the process with psutil and tell whose it is
  by its parent pid.
"""

from __future__ import annotations

import sys
from pathlib import Path

from media.ffmpeg import ffmpeg_path
from workers.stages.base import ChildSpec, PermanentFailure, PublishSpec, StageContext, stage

# A child that starts a grandchild in its own process group (so only a group kill reaches it),
# prints both pids, then ticks on stdout (or stays silent, to trip the stall watchdog).
CHILD = r"""
import os, subprocess, sys, time
seconds, silent = float(sys.argv[1]), sys.argv[2] == "silent"
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(f"pids {os.getpid()} {grandchild.pid}", flush=True)
end = time.monotonic() + seconds
tick = 0
while time.monotonic() < end:
    tick += 1
    if not silent:
        print(f"tick {tick}", flush=True)
    time.sleep(0.1)
grandchild.kill()
grandchild.wait()
print("done", flush=True)
"""


@stage("test.subprocess")
def run_subprocess(ctx) -> dict:
    params = ctx.job_params
    seconds = float(params.get("seconds", 30))
    pidfile = Path(params["pidfile"])

    def on_line(line: str) -> None:
        if line.startswith("pids "):
            pidfile.write_text(line[5:])
        elif line.startswith("tick "):
            ctx.progress(min(99.0, int(line[5:]) * 10.0 / seconds))

    proc = ctx.run(
        [sys.executable, "-c", CHILD, str(seconds), "silent" if params.get("silent") else "loud"],
        on_stdout_line=on_line,
        stall_seconds=params.get("stall_seconds"),
    )
    ctx.log(f"child exited {proc.returncode}")
    return {"returncode": proc.returncode}


@stage("test.publish")
def publish(ctx) -> dict:
    path = Path(ctx.workspace) / "hello.txt"
    path.write_text(f"hello from task {ctx.task_id}\n")
    ctx.log("wrote hello.txt")
    ctx.publish_file(PublishSpec(source=path, name="hello.txt", kind="data", metadata={"lines": 1}))
    return {"published": ["hello.txt"]}


@stage("test.crash")
def crash(ctx) -> None:
    if ctx.job_params.get("permanent"):
        raise PermanentFailure("bad input: this cannot work")
    raise RuntimeError("boom")


def _sleep_checking(ctx, seconds: float) -> None:
    """Sleep in small steps, reporting progress (a fenced write: a lost lease raises LeaseLost)."""
    import time

    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(0.2, left))
        ctx.progress(100.0 * (1 - max(0.0, end - time.monotonic()) / seconds))


@stage("test.fanout")
def fanout(ctx) -> dict:
    """A dispatch that spawns `children` test.leaf stages (job placement, so they run where the
    dispatch ran). Attempt 1 of execution 1 sleeps `dispatch_seconds`: the failover tests lose it."""
    params = ctx.job_params
    if ctx.execution_id == 1 and ctx.attempt == 1:
        _sleep_checking(ctx, float(params.get("dispatch_seconds", 0)))
    for _ in range(int(params.get("children", 2))):
        ctx.spawn_child(ChildSpec("test.leaf", {}))
    return {"children": int(params.get("children", 2))}


@stage("test.leaf")
def leaf(ctx) -> dict:
    """Sleeps `leaf_seconds[index]` on its first attempt in execution 1 (0.2 s otherwise), then
    publishes leaf-<index>.txt from the workspace."""
    index = int(ctx.payload["index"])
    slow = ctx.job_params.get("leaf_seconds") or []
    first = ctx.execution_id == 1 and ctx.attempt == 1
    _sleep_checking(ctx, float(slow[index]) if first and index < len(slow) else 0.2)
    path = Path(ctx.workspace) / f"leaf-{index}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"leaf {index} of execution {ctx.execution_id}\n")
    ctx.publish_file(PublishSpec(source=path, name=f"leaf-{index}.txt", kind="data"))
    return {"index": index}


FARM_OUTPUT_NAME = "farm.mp4"


@stage("farm_encode")
def farm_encode(ctx: StageContext) -> dict:
    seconds = float(ctx.job_params.get("seconds", 20))
    marker = str(ctx.job_params["marker"])
    partial = ctx.workspace / f"{FARM_OUTPUT_NAME}.partial"
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
    final = partial.with_name(FARM_OUTPUT_NAME)
    partial.rename(final)
    ctx.publish_file(PublishSpec(final, FARM_OUTPUT_NAME, kind="video"))
    ctx.spawn_child(ChildSpec("noop", {"seconds": 0}))
    return {"seconds": seconds}
