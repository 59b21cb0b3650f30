"""A stage the benchmark adds to its workers (JETENCODE_EXTRA_STAGE_MODULES=bench/stages.py).

`bench_probe` records the wall-clock time at which its handler started, so the idle wake-up
measurement can time enqueue -> handler start on one clock (the bench and its workers share the
machine). It does nothing else: no progress write, no children.

At import it also applies the worker-side proposals named in JETENCODE_BENCH_WORKER_PROPOSALS
(`python -m bench --proposal ...`, see bench/proposals.py): measurement only, in bench workers only.
"""

from __future__ import annotations

import time

from workers.stages.base import StageContext, stage


@stage("bench_probe")
def bench_probe(ctx: StageContext) -> dict:
    started = time.time()
    return {"handler_started": started}


# ---- worker-side proposals (python -m bench --proposal ...; see bench/proposals.py) -------------
# Applied inside the bench's worker processes only, when this module is imported at worker start.

def _apply_worker_proposals() -> None:
    import os

    names = [n for n in os.environ.get("JETENCODE_BENCH_WORKER_PROPOSALS", "").split(",") if n]
    if "no-final-progress-write" in names:
        from workers.context import RunContext

        original = RunContext.progress

        def progress(self, percent, detail=None):
            if float(percent) >= 100.0 and not detail:
                self.check_cancelled()  # the finish itself records 100 %: no write of its own
                return
            return original(self, percent, detail)

        RunContext.progress = progress
    if "no-health-check" in names:
        from django.conf import settings

        settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] = False


_apply_worker_proposals()
