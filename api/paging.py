"""Bounded paging for every API list: an offset is at most MAX_OFFSET rows (OFFSET reads and drops
every row before the page, so a page in the millions is a table scan anyone with a read token could
repeat), and the job list, which grows without end, also pages by cursor (keyset: the next page
starts after the last job of this one, at the cost of one index step)."""

from __future__ import annotations

import uuid
from datetime import datetime

from media import submission

MAX_OFFSET = 10_000
CURSOR_SEPARATOR = "~"


def offset_of(page: int, limit: int, hint: str) -> int:
    """(page - 1) x limit, or a 422 naming `page` when it is past MAX_OFFSET."""
    offset = (page - 1) * limit
    if offset > MAX_OFFSET:
        raise submission.ValidationError(
            [
                {
                    "field": "page",
                    "message": f"the offset (page - 1) x limit is {offset}, at most {MAX_OFFSET}: {hint}",
                }
            ]
        )
    return offset


def cursor_of(created_at: datetime, job_id: uuid.UUID) -> str:
    """The cursor that continues after this job (newest-first order: created_at, then id)."""
    return f"{created_at.isoformat()}{CURSOR_SEPARATOR}{job_id}"


def parse_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """(created_at, id) of a cursor from `cursor_of`, or a 422 naming `cursor`."""
    try:
        moment, _, job_id = cursor.partition(CURSOR_SEPARATOR)
        parsed = datetime.fromisoformat(moment), uuid.UUID(job_id)
        if parsed[0].tzinfo is None:
            raise ValueError("naive")
        return parsed
    except ValueError:
        raise submission.ValidationError(
            [{"field": "cursor", "message": "not a cursor this API gave (pagination.next_cursor)"}]
        ) from None
