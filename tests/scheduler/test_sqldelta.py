"""The delta writer (scheduler/sqldelta.py): how SQL files split into statements, and which of them a
new migration must ship."""

from scheduler import sqldelta

FILE = """-- Header of the file: what it is for.

-- Adds one. A semicolon in a comment; and a quote ' too.
CREATE OR REPLACE FUNCTION add_one(p_value int,
    p_step int DEFAULT 1) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'a ; inside a string, and a doubled '' quote';
    RETURN p_value + p_step;  -- a ; after a comment marker
END $$;

CREATE OR REPLACE FUNCTION tagged() RETURNS text LANGUAGE sql AS $body$ SELECT 'x;$$y' $body$;
ALTER TABLE t ADD COLUMN IF NOT EXISTS c int;
"""


def test_statements_split_at_top_level_semicolons_with_their_comments():
    found = sqldelta.statements(FILE)
    assert [s.key for s in found] == [
        "add_one(p_value int, p_step int DEFAULT 1)",
        "tagged()",
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS c int;",
    ]
    assert found[0].comment == "-- Adds one. A semicolon in a comment; and a quote ' too."
    assert found[0].sql.endswith("END $$;") and "RETURN p_value + p_step;" in found[0].sql
    assert found[1].sql.endswith("$body$;")
    assert [s.is_function for s in found] == [True, True, False]


def test_delta_holds_changed_and_new_statements_only(tmp_path):
    (tmp_path / "0002_a.sql").write_text(FILE)
    before = sqldelta.installed([tmp_path / "0002_a.sql"])
    assert sqldelta.delta(sqldelta.statements(FILE), before) == []

    edited = FILE.replace("p_value + p_step", "p_step + p_value") + (
        "\nCREATE OR REPLACE FUNCTION fresh() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;\n"
    )
    changed = sqldelta.delta(sqldelta.statements(edited), before)
    assert [s.key for s in changed] == ["add_one(p_value int, p_step int DEFAULT 1)", "fresh()"]

    without_tagged = edited.replace(sqldelta.statements(FILE)[1].sql, "")
    assert sqldelta.removed(sqldelta.statements(without_tagged), before) == ["tagged()"]

    # Trailing spaces are not a change; the rendered delta replays to the current state.
    delta_file = tmp_path / "0003_b.sql"
    delta_file.write_text(sqldelta.render("0003_b", changed))
    after = sqldelta.installed([tmp_path / "0002_a.sql", delta_file])
    assert sqldelta.delta(sqldelta.statements(edited.replace("\n", "  \n")), after) == []


def test_a_drop_in_a_migration_file_uninstalls_the_name(tmp_path):
    (tmp_path / "0002_a.sql").write_text(FILE)
    (tmp_path / "0003_b.sql").write_text("DROP FUNCTION IF EXISTS tagged();\n")
    functions, others = sqldelta.installed([tmp_path / "0002_a.sql", tmp_path / "0003_b.sql"])
    assert "tagged()" not in functions and "DROP FUNCTION IF EXISTS tagged();" in others
