"""A stage the benchmark adds to its workers (JETENCODE_EXTRA_STAGE_MODULES=bench/stages.py).

`bench_probe` records the wall-clock time at which its handler started, so the idle wake-up
measurement can time enqueue -> handler start on one clock (the bench and its workers share the
machine). It does nothing else: no progress write, no children.
"""

from __future__ import annotations

import time

from workers.stages.base import StageContext, stage


@stage("bench_probe")
def bench_probe(ctx: StageContext) -> dict:
    started = time.time()
    return {"handler_started": started}
