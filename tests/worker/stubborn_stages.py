"""Stages for tests/worker/test_timeouts.py, loaded by the workers through
JETENCODE_EXTRA_STAGE_MODULES: one handler that honours its context, one that ignores it."""

import time

from workers.stages.base import stage


@stage("test.checkpoints")
def checkpoints(ctx) -> dict:
    """Loops on ctx.check_cancelled() for `seconds`: a timeout stops it at the next checkpoint."""
    end = time.monotonic() + float(ctx.job_params.get("seconds", 60))
    while time.monotonic() < end:
        ctx.check_cancelled()
        time.sleep(0.05)
    return {}


@stage("test.stubborn")
def stubborn(ctx) -> dict:
    """Sleeps `seconds` without a single context call: nothing can stop it from inside."""
    time.sleep(float(ctx.job_params.get("seconds", 60)))
    return {"slept": True}
