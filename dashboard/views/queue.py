"""/dashboard/queue: jobs (not task rows) grouped into Pending/unassigned and one section per worker.

The order inside a section is claim order (priority, then position), exactly as `queries.queue_list`
returns it; a targeted job that no worker has claimed yet sits in its required worker's section.
queue.js refetches the live partial every 5 seconds (slower while the tab is hidden) and right after
each action.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dashboard.views.common import is_partial, page, page_number, viewer_required
from scheduler import queries
from scheduler.constants import QUEUE_STATUSES

PAGE_SIZE = 100  # jobs per page: a page of the queue stays fast to render with 100,000 jobs queued


@dataclass
class Section:
    key: str  # '' for pending
    title: str
    worker: dict | None = None
    entries: list = field(default_factory=list)


def build_sections(entries, workers) -> list[Section]:
    sections = {"": Section("", "Pending / unassigned")}
    by_uid = {w["uid"]: w for w in workers}
    # Every worker that could take work gets a section even when it has none; offline workers only
    # when jobs still wait for (or are assigned to) them.
    for worker in workers:
        if worker["lifecycle"] != "offline":
            sections[worker["uid"]] = Section(worker["uid"], worker["uid"], worker)
    for entry in entries:
        key = entry.group or ""
        if key not in sections:
            sections[key] = Section(key, key, by_uid.get(key))
        sections[key].entries.append(entry)
    pending = sections.pop("")
    return [pending, *sorted(sections.values(), key=lambda s: s.key)]


@viewer_required
def queue(request):
    state = request.GET.get("state") or None
    if state not in QUEUE_STATUSES:
        state = None
    worker = request.GET.get("worker")
    worker = None if worker in (None, "", "*") else ("" if worker == "-" else worker)
    number = page_number(request, PAGE_SIZE)
    entries = queries.queue_list(
        worker=worker, state=state, limit=PAGE_SIZE + 1, offset=(number - 1) * PAGE_SIZE
    )
    has_next = len(entries) > PAGE_SIZE
    entries = entries[:PAGE_SIZE]
    workers = queries.workers_overview()
    context = {
        "sections": build_sections(
            entries, workers if worker is None else [w for w in workers if w["uid"] == worker]
        ),
        "entry_count": len(entries),
        "page_number": number,
        "has_next": has_next,
        "state": state or "",
        "worker": request.GET.get("worker", ""),
        "states": QUEUE_STATUSES,
        "workers": workers,
    }
    if is_partial(request):
        return page(request, "dashboard/partials/queue_sections.html", context)
    return page(request, "dashboard/queue.html", context)
