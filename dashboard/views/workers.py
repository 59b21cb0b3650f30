"""/dashboard/workers and /dashboard/workers/<uid>: lifecycle, capacity and utilization per pool and
category, VRAM, the latest system sample, active tasks, the capability catalog, and drain."""

from __future__ import annotations

from django.http import Http404

from dashboard.templatetags.dashboard import filesize
from dashboard.views import disclosure
from dashboard.views.common import is_partial, page, viewer_required
from scheduler import queries


def describe(worker: dict) -> dict:
    """Add what the templates draw: per-category utilization, gauges and the VRAM bar."""
    limits = worker["category_limits"] or {}
    running = worker["running_by_category"] or {}
    worker["categories"] = [
        {"name": name, "limit": int(limit or 0), "running": int(running.get(name, 0))}
        for name, limit in sorted(limits.items())
        if int(limit or 0) or int(running.get(name, 0))
    ] + [
        {"name": name, "limit": 0, "running": int(count)}
        for name, count in sorted(running.items())
        if name not in limits
    ]
    sample = worker["system_sample"] or {}
    memory = sample.get("memory") if isinstance(sample.get("memory"), dict) else {}
    disk = sample.get("disk") if isinstance(sample.get("disk"), dict) else {}
    cpu_text = None
    if sample.get("cpu_percent") is not None:
        cpu_text = f"{sample['cpu_percent']:.0f}%"
        if sample.get("load_average"):
            cpu_text += " · load " + " ".join(str(x) for x in sample["load_average"][:1])
    worker["gauges"] = [
        {"label": "CPU", "value": sample.get("cpu_percent"), "text": cpu_text},
        {
            "label": "Memory",
            "value": memory.get("percent"),
            "text": f"{filesize(memory.get('used'))} / {filesize(memory.get('total'))}"
            if memory.get("total")
            else None,
        },
        {
            "label": "Disk",
            "value": disk.get("percent"),
            "text": f"{filesize(disk.get('free'))} free" if disk.get("total") else None,
        },
    ]
    worker["sample_items"] = sorted(
        (k, ", ".join(friendly(k, i) for i in v) if isinstance(v, list) and v else friendly(k, v))
        for k, v in sample.items()
        if not isinstance(v, dict)
    )
    worker["sample_groups"] = sorted(
        (k, {gk: friendly(gk, gv) for gk, gv in v.items()}) for k, v in sample.items() if isinstance(v, dict)
    )
    worker["vram_percent"] = (
        round(100 * worker["vram_used_mb"] / worker["vram_total_mb"]) if worker["vram_total_mb"] else 0
    )
    worker["vram_label"] = f"{worker['vram_used_mb']} / {worker['vram_total_mb']} MB"
    worker["capacity"] = [
        _meter("Media", worker["media_running"], worker["concurrency"]),
        _meter("Background", worker["background_running"], worker["background_slots"]),
        *(_meter(c["name"], c["running"], c["limit"]) for c in worker["categories"]),
    ]
    return worker


def _meter(label: str, used: int, total: int) -> dict:
    return {"label": label, "percent": round(100 * used / total) if total else 0, "text": f"{used} / {total}"}


# How a missing catalog entry reads: `ffprobe None` says nothing to a newcomer.
NOTHING = {
    "ffprobe": "not found",
    "ffmpeg": "not found",
    "gpus": "none detected",
    "hardware_encoders": "none",
}


def friendly(name: str, value: object) -> str:
    """A scalar catalog value in words: None, empty, booleans."""
    if value is None or value == "" or value == [] or value == {}:
        return NOTHING.get(name, "none")
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def catalog_sections(capabilities: dict) -> list[tuple[str, str, object]]:
    """The capability catalog as (name, kind, value): kind "list" (non-empty lists, shown as
    tags), "dict" (nested name/value pairs, in words) or "text" (everything else, in words)."""
    sections = []
    for name, value in sorted(capabilities.items(), key=lambda item: str(item[0])):
        name = str(name)
        if isinstance(value, list | tuple) and value:
            sections.append((name, "list", [friendly(name, item) for item in value]))
        elif isinstance(value, dict) and value:
            sections.append((name, "dict", [(str(k), friendly(str(k), v)) for k, v in value.items()]))
        else:
            sections.append((name, "text", friendly(name, value)))
    return sections


@viewer_required
def workers(request):
    rows = [disclosure.worker(request.user, describe(w)) for w in queries.workers_overview()]
    counts = {"active": 0, "draining": 0, "offline": 0}
    for w in rows:
        counts[w["lifecycle"]] = counts.get(w["lifecycle"], 0) + 1
    context = {"workers": rows, "counts": counts}
    if is_partial(request):
        return page(request, "dashboard/partials/workers_list.html", context)
    return page(request, "dashboard/workers.html", context)


@viewer_required
def worker_detail(request, uid):
    found = queries.workers_overview(uid)
    if not found:
        raise Http404("no such worker")
    worker = disclosure.worker(request.user, describe(found[0]))
    context = {
        "w": worker,
        "active_tasks": queries.worker_active_tasks(uid),
        "queued": queries.queue_list(worker=uid, limit=50),
        "catalog": catalog_sections(worker["capabilities"]),
    }
    if is_partial(request):
        return page(request, "dashboard/partials/worker_live.html", context)
    return page(request, "dashboard/worker.html", context)
