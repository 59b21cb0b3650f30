"""Bounded paging for every API list: an offset is at most MAX_OFFSET rows (OFFSET reads and drops
every row before the page, so a page in the millions is a table scan anyone with a read token could
repeat), and the job list, which grows without end, also pages by cursor (keyset: the next page
starts after the last job of this one, at the cost of one index step). The bound is the `page` and
`limit` parameters' declared maxima (api.schemas), so the schema says it; `offset_of` checks it
again for callers that build pages themselves."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from api.schemas import MAX_LIMIT, MAX_PAGE
from media import submission

MAX_OFFSET = (MAX_PAGE - 1) * MAX_LIMIT
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


# A cursor is the last job's created_at in microseconds since the epoch and its id. The schema
# declares this pattern, and every string that matches it parses (16 digits reach the year 2286),
# so a request the schema calls valid is never refused for its cursor.
CURSOR_PATTERN = (
    f"^[0-9]{{1,16}}{CURSOR_SEPARATOR}[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$"
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cursor_of(created_at: datetime, job_id: uuid.UUID) -> str:
    """The cursor that continues after this job (newest-first order: created_at, then id)."""
    micros = (created_at - EPOCH) // timedelta(microseconds=1)
    return f"{micros}{CURSOR_SEPARATOR}{job_id}"


def parse_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """(created_at, id) of a cursor from `cursor_of` (the API checked CURSOR_PATTERN already)."""
    micros, _, job_id = cursor.partition(CURSOR_SEPARATOR)
    return EPOCH + timedelta(microseconds=int(micros)), uuid.UUID(job_id)
