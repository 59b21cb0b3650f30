"""Migration helpers shared by the scheduler's migrations."""

from pathlib import Path

FUNCTIONS_V1 = Path(__file__).resolve().parent.parent / "sql" / "functions_v1.sql"


def reinstall_functions_v1(apps, schema_editor):
    """(Re)create every v1 function from scheduler/sql/functions_v1.sql (all CREATE OR REPLACE).

    Sent straight to the cursor without parameters, so '%' in the SQL is not taken for a placeholder.
    """
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(FUNCTIONS_V1.read_text())
