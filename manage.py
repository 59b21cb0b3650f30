#!/usr/bin/env python
import os
import sys

# Commands that need no database: they only print, or look after the embedded server themselves
# (`embedded_db status` must report on the server, not start it).
NO_DATABASE = {"help", "--help", "-h", "version", "--version", "embedded_db"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jetencode.settings")
    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    # pg_stat_activity shows each command's connections as jetencode-<command> (jetencode-migrate...).
    os.environ.setdefault("JETENCODE_APPLICATION_NAME", f"jetencode-{command}")
    if command not in NO_DATABASE and not {"-h", "--help"} & set(sys.argv[2:]):
        from jetencode import embedded_db

        embedded_db.start_if_used()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
