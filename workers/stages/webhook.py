"""webhook: POST a signed JSON summary of a job that reached a terminal state.

Inserted by the scheduler (cluster placement, background pool) in the transaction that sets the
terminal status; it never changes the job (DECISIONS 4). Payload: {"url", "event", "webhook_id"}
and optionally "job" (a summary) and "occurred_at"; without "job" the summary is read from the
jobs table (read-only) when the webhook is sent. The webhook-id is taken from the payload so it is
the same on every retry; a non-2xx answer or a network error raises, and the queue's retry policy
tries again. The stage log keeps the status of an answer, never its body.
"""

from __future__ import annotations

import http.client
from datetime import UTC, datetime

from media import failures, links, webhooks
from media.disclosure import url_without_query
from media.quality import job_quality
from scheduler import queries
from workers.stages.base import PermanentFailure, StageContext, stage


def job_summary(job_id: str) -> dict:
    """The JSON summary of a job a receiver gets as `data`: status, timing, error and outputs."""
    from scheduler.models import Job

    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return {"id": str(job_id)}
    outputs = [
        {
            "name": o.name,
            "kind": o.kind,
            "size_bytes": o.size_bytes,
            "url": o.storage_url,
            "download_url": links.public_output_url(job.pk, o.name),
        }
        for o in job.outputs.filter(execution_id=job.schedule.execution_id).order_by("name")
    ]
    failed_stage = queries.failed_stages([job.pk]).get(job.pk) if job.status == "failed" else None
    return {
        "id": str(job.pk),
        "type": job.type,
        "status": job.status,
        "progress": job.progress,
        "params": job.params,
        "priority": job.priority,
        "error": failures.one_line(job.last_error, failed_stage),
        "created_at": job.created_at.isoformat() if job.created_at else None,
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "outputs": outputs,
        "quality": job_quality(job.pk),
    }


@stage("webhook")
def webhook(ctx: StageContext) -> dict:
    payload = ctx.payload or {}
    url = payload.get("url")
    if not url:
        raise PermanentFailure("webhook payload has no url")
    event = str(payload.get("event") or "job.updated")
    job = payload.get("job") or job_summary(ctx.job_id)
    webhook_id = str(payload.get("webhook_id") or f"msg_task_{ctx.task_id}")
    occurred_at = str(payload.get("occurred_at") or job.get("finished_at") or datetime.now(UTC).isoformat())
    body = webhooks.envelope(event, job, occurred_at)
    try:
        delivery = webhooks.send(url, body, webhook_id)
    except webhooks.UnsafeWebhookURL as exc:
        ctx.log(f"refused {url_without_query(url)}: {exc}")
        raise PermanentFailure(str(exc)) from None
    except (OSError, http.client.HTTPException) as exc:
        ctx.log(f"POST {url_without_query(url)} failed: {exc!r}")
        raise RuntimeError(f"webhook delivery failed: {exc}") from exc
    ctx.log(
        f"POST {url_without_query(url)} ({delivery.address}) {event} webhook-id={webhook_id} -> {delivery.status}"
    )
    if not delivery.ok:
        # Only the status: a receiver's error body may carry anything (tokens, internal pages), and
        # stage logs are readable by viewers.
        raise RuntimeError(f"webhook receiver answered {delivery.status}")
    ctx.progress(100.0)
    return {"status": delivery.status, "webhook_id": webhook_id, "event": event}
