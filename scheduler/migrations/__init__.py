"""Migration helpers shared by the scheduler's migrations."""

from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
FUNCTIONS_V1 = SQL_DIR / "functions_v1.sql"


def reinstall_functions_v1(apps, schema_editor):
    """(Re)create every v1 function from scheduler/sql/functions_v1.sql (all CREATE OR REPLACE).

    Sent straight to the cursor without parameters, so '%' in the SQL is not taken for a placeholder.
    """
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(FUNCTIONS_V1.read_text())


def run_sql_file(name: str):
    """A RunPython operation body that runs scheduler/sql/migrations/<name>: the SQL this migration
    installs, kept as it was when the migration was written."""

    def run(apps, schema_editor):
        with schema_editor.connection.cursor() as cursor:
            cursor.execute((SQL_DIR / "migrations" / name).read_text())

    return run
