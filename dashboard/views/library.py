"""/dashboard/library: the media assets, their probed metadata and validity, and the actions that
turn assets into jobs (through `media.submission.create_job`, exactly like the API)."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.db.models import Q
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse

from dashboard.files import serve_output
from dashboard.views.common import cheap_page, is_partial, operator_required, page, viewer_required
from media.models import MediaAsset
from media.submission import ValidationError as JobValidationError
from media.submission import create_job

PAGE_SIZE = 50
MAX_BULK = 100
# The library actions and the job type each creates; move_to_library also takes a target directory.
ACTIONS = {
    "transcode": "Transcode (HLS ladder)",
    "reencode_streaming": "Re-encode for streaming",
    "thumbnail_generate": "Generate thumbnail",
    "validate": "Validate",
    "move_to_library": "Move to library directory",
    "scene_extract": "Extract scenes",
}
ORIENTATIONS = ["landscape", "portrait", "square"]


@viewer_required
def library(request):
    filters = {key: request.GET.get(key, "").strip() for key in ("q", "directory", "validity", "orientation")}
    qs = MediaAsset.objects.order_by("-created_at", "id")
    if filters["q"]:
        qs = qs.filter(Q(title__icontains=filters["q"]) | Q(path__icontains=filters["q"]))
    if filters["directory"]:
        qs = qs.filter(directory=filters["directory"])
    if filters["validity"] == "valid":
        qs = qs.filter(valid=True)
    elif filters["validity"] == "invalid":
        qs = qs.filter(valid=False)
    elif filters["validity"] == "unchecked":
        qs = qs.filter(valid__isnull=True)
    if filters["orientation"] in ORIENTATIONS:
        qs = qs.filter(orientation=filters["orientation"])
    context = {
        "page_obj": cheap_page(qs, request, PAGE_SIZE),
        "filters": filters,
        "filtered": any(filters.values()),
        "directories": list(
            MediaAsset.objects.order_by("directory").values_list("directory", flat=True).distinct()[:200]
        ),
        "orientations": ORIENTATIONS,
        "actions": ACTIONS,
    }
    if is_partial(request):
        return page(request, "dashboard/partials/library_table.html", context)
    return page(request, "dashboard/library.html", context)


@viewer_required
def asset_thumbnail(request, asset_id):
    """The asset's thumbnail: an output file, so the same containment rules apply."""
    asset = get_object_or_404(MediaAsset.objects.only("thumbnail"), pk=asset_id)
    job_part, _, name = asset.thumbnail.partition("/")
    try:
        job_id = uuid.UUID(job_part)
    except ValueError:
        raise Http404("no thumbnail") from None
    return serve_output(request, job_id, name)


def _params(action: str, asset: MediaAsset, target_directory: str) -> dict:
    params = {"video_id": str(asset.id)}
    if action == "move_to_library":
        params["target_directory"] = target_directory or "videos"
    return params


@operator_required
def library_action(request):
    """Per-asset (`one=<action>:<asset id>`) or bulk (`action` + checked `asset` ids) job creation."""
    back = reverse("dashboard:library")
    one = request.POST.get("one", "")
    if one:
        action, _, raw_ids = one.partition(":")
        raw_ids = [raw_ids]
    else:
        action = request.POST.get("action", "")
        raw_ids = request.POST.getlist("asset")
    if action not in ACTIONS:
        messages.error(request, "Choose an action.")
        return redirect(back)
    ids = []
    for raw in raw_ids[:MAX_BULK]:
        try:
            ids.append(uuid.UUID(raw))
        except ValueError:
            continue
    assets = list(MediaAsset.objects.filter(id__in=ids).order_by("path"))
    if not assets:
        messages.error(request, "Select at least one asset.")
        return redirect(back)
    target = request.POST.get("target_directory", "").strip()
    created, failed = [], []
    for asset in assets:
        try:
            job = create_job(request.user, {"type": action, "params": _params(action, asset, target)})
        except JobValidationError as exc:
            reasons = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in exc.errors) or str(exc)
            failed.append(f"{asset.path}: {reasons}")
        else:
            created.append(job.id)
    for failure in failed[:10]:
        messages.error(request, f"{ACTIONS[action]} not created for {failure}")
    if not created:
        return redirect(back)
    messages.success(request, f"Created {len(created)} {action} job{'s' if len(created) != 1 else ''}.")
    if len(created) == 1:
        return redirect("dashboard:job", created[0])
    return redirect(reverse("dashboard:jobs") + "?ids=" + ",".join(str(i) for i in created))
