"""noop: a job that does nothing, slowly and predictably — for scheduler tests and demos.

Sleeps `seconds` in small steps (checking for cancellation), fails attempts 1..`fail_attempts` on
purpose, then spawns `children` noop children that each sleep the same time.
"""

from __future__ import annotations

import time

from workers.stages.base import StageContext, stage
from workers.stages.common import child, stage_params, throttle_for

STEP_SECONDS = 0.1  # how quickly a cancellation is noticed


@stage("noop")
def noop(ctx: StageContext) -> dict:
    params = stage_params(ctx, "noop")
    throttle = throttle_for(ctx)
    deadline = time.monotonic() + params.seconds
    ctx.check_cancelled()
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(STEP_SECONDS, remaining))
        ctx.check_cancelled()
        if params.seconds:
            throttle.update(100.0 * (1 - max(0.0, deadline - time.monotonic()) / params.seconds))
    if ctx.attempt <= params.fail_attempts:
        raise RuntimeError(
            f"noop: attempt {ctx.attempt} fails on purpose (fail_attempts={params.fail_attempts})"
        )
    for _ in range(params.children):
        ctx.spawn_child(child("noop", {"seconds": params.seconds, "children": 0}))
    ctx.progress(100.0)
    return {"slept_seconds": params.seconds, "attempt": ctx.attempt, "children": params.children}
