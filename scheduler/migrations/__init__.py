"""Migration helpers shared by the scheduler's migrations."""

from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"


def run_sql_file(name: str):
    """A RunPython operation body that runs scheduler/sql/migrations/<name>: the SQL this migration
    installs (the statements that changed since the migration before, scheduler/sqldelta.py), kept
    as it was when the migration was written; the current SQL in scheduler/sql/functions/ may have
    moved on since, and a later migration installs that with a delta of its own.

    Sent straight to the cursor without parameters, so '%' in the SQL is not taken for a placeholder.
    """

    def run(apps, schema_editor):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute((SQL_DIR / "migrations" / name).read_text())

    return run
