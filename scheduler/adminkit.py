"""Admin building blocks for tables of millions of rows, used by every app's admin.

`CheapPaginationMixin` never counts the table (a paginator that looks a few pages ahead with LIMIT,
no full result count, no facets); `choices_filter` filters on a fixed list of values instead of
SELECT DISTINCT; `ReadOnlyAdmin` is for state only the repository writes.
"""

from __future__ import annotations

from django.contrib import admin
from django.core.paginator import Paginator
from django.utils.functional import cached_property

MAX_ACTION_ROWS = 500  # an admin action acts on at most this many selected rows
LOOKAHEAD_PAGES = 5


class CheapPaginator(Paginator):
    """Counts at most a few pages past the one shown, by fetching primary keys with LIMIT: the admin
    never runs COUNT(*) over a table of millions of rows. The count it reports is exact once the end
    is within reach, else a lower bound (enough for the next pages' links)."""

    def __init__(self, *args, page_number: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.page_number = page_number

    @cached_property
    def count(self) -> int:
        offset = (self.page_number - 1) * self.per_page
        limit = offset + LOOKAHEAD_PAGES * self.per_page + 1
        return offset + len(self.object_list.values_list("pk", flat=True)[offset:limit])


class CheapPaginationMixin:
    """For admins of big tables: the cheap paginator and no full count."""

    paginator = CheapPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        try:
            number = max(1, int(request.GET.get("p", "1")))
        except ValueError:
            number = 1
        return self.paginator(queryset, per_page, orphans, allow_empty_first_page, page_number=number)


def choices_filter(field: str, values, title: str | None = None) -> type[admin.SimpleListFilter]:
    """A list filter with a fixed set of values (the default one runs SELECT DISTINCT on the table)."""

    class FixedChoices(admin.SimpleListFilter):
        parameter_name = field

        def lookups(self, request, model_admin):
            return [(value, value.replace("_", " ")) for value in values]

        def queryset(self, request, queryset):
            return queryset.filter(**{field: self.value()}) if self.value() else queryset

    FixedChoices.title = title or field.replace("_", " ")
    FixedChoices.__name__ = f"{field.title().replace('_', '')}Filter"
    return FixedChoices


class ReadOnlyAdmin(admin.ModelAdmin):
    """Queue state is written by the scheduler's repository only: view it, act through actions."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
