"""`runworker` refuses bad options and timing with a clear message and exit status 2."""

import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from tests.kit.workers import ROOT, worker_environment

# Real processes for a few (the exit status and stderr as an operator sees them)...
CASES = [
    (["--concurrency", "0"], {}, "--concurrency must be between 1 and"),
    (["--categories", "tpu=1"], {}, "unknown category 'tpu'"),
    (
        [],
        {"JETENCODE_LEASE_SECONDS": "2", "JETENCODE_HEARTBEAT_SECONDS": "1"},
        "must be at least three heartbeats",
    ),
]
# ...and the rest in-process, where the command raises CommandError(returncode=2).
IN_PROCESS = [
    (["--concurrency", "many"], "--concurrency must be an integer"),
    (["--categories", "cpu=x"], "--categories cpu must be an integer"),
    (["--categories", "cpu"], "is not NAME=N"),
    (["--categories", "cpu=1,cpu=2"], "cpu is given twice"),
    (["--vram-mb", "-5"], "--vram-mb must be between 0 and"),
    (["--uid", "has space"], "--uid 'has space' is not valid"),
    (["--workspace", "/proc/no-such-place"], "--workspace '/proc/no-such-place' cannot be created"),
]


@pytest.mark.timeout(60)
def test_bad_options_exit_2_with_a_clear_message(tmp_path):
    # Validation happens before any database access; the URL only keeps settings off the embedded DB.
    base = worker_environment("postgresql://postgres@127.0.0.1:5432/postgres", tmp_path)
    procs = [
        (
            args,
            expected,
            subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--uid", "opt-test", *args],
                cwd=ROOT,
                env={**base, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for args, env, expected in CASES
    ]
    for args, expected, proc in procs:
        out, err = proc.communicate(timeout=50)
        assert proc.returncode == 2, (args, out, err)
        assert expected in err, (args, err)
        assert "Traceback" not in err, (args, err)


@pytest.mark.parametrize(("args", "expected"), IN_PROCESS)
def test_bad_option_values_are_refused_before_anything_starts(args, expected):
    with pytest.raises(CommandError) as caught:
        call_command("runworker", "--uid", "opt-test", *args)
    assert caught.value.returncode == 2
    assert expected in str(caught.value)
