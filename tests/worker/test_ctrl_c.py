"""Ctrl-C in the terminal of `./scripts/run` (`manage.py runall`): SIGINT to the whole process group
of the run command drains the worker first while the web keeps answering, then stops the web; a
second Ctrl-C stops now; the messages say Ctrl-C, not SIGTERM; a job caught between its stages
resumes from its completed stages on the next start. Real processes, real signals."""

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from tests.kit import ROOT
from tests.kit.db import one
from tests.kit.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunCommand:
    """`manage.py runall` as the terminal starts it: the leader of its own process group."""

    def __init__(self, env, log_path, uid, concurrency=1):
        self.log_path = log_path
        self.uid = uid
        self.port = free_port()
        with open(log_path, "wb") as handle:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "runall",
                    "--no-demo",
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "--worker-args",
                    f"--uid {uid} --concurrency {concurrency}",
                ],
                cwd=ROOT,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def ctrl_c(self) -> None:
        os.killpg(self.popen.pid, signal.SIGINT)  # what the terminal does: the whole group

    def health(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return response.status
        except OSError:
            return None

    def kill(self) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        pid = one("SELECT pid FROM queue_workers WHERE uid = %s", [self.uid])
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def run_command(worker_env, tmp_path):
    started = []

    def start(uid, **kwargs):
        command = RunCommand(worker_env, tmp_path / f"runall-{uid}-{len(started)}.log", uid, **kwargs)
        started.append(command)
        wait_for(lambda: "JetEncode is up" in command.output(), 90, "the run command to say it is up")
        return command

    yield start
    for command in started:
        if command.popen.poll() is None:
            sys.stderr.write(command.output()[-5000:])
        command.kill()


def task_of(job):
    return one(
        "SELECT ARRAY[state, attempt::text] FROM queue_tasks WHERE job_id = %s AND placement = 'dispatch'",
        [job],
    )


def test_one_ctrl_c_drains_the_worker_first_while_the_web_keeps_answering(run_command, enqueue):
    command = run_command("ctrl-c-drain")
    job = enqueue("noop", {"seconds": 2.5})
    wait_for(lambda: task_of(job)[0] == "running", 20, "the stage to run")
    command.ctrl_c()
    wait_for(
        lambda: one("SELECT lifecycle FROM queue_workers WHERE uid = 'ctrl-c-drain'") == "draining",
        10,
        "the worker to drain",
    )
    # The stage still runs on the draining worker, and the web still answers.
    assert task_of(job)[0] == "running"
    assert command.health() == 200
    assert command.popen.wait(60) == 0, command.output()[-4000:]
    assert task_of(job) == ["completed", "1"], command.output()[-4000:]  # it finished: drained, not aborted
    output = command.output()
    lines = output.splitlines()

    def index(text):
        return next(i for i, line in enumerate(lines) if text in line)

    assert index("Ctrl-C: draining the worker first") < index(
        "The worker has stopped (exit 0): stopping the web"
    )
    assert index("Ctrl-C: draining (no new claims") < index("drained: every running stage finished")
    assert index("drained: every running stage finished") < index("stopping the web")
    assert lines[-1] == "JetEncode stopped.", lines[-5:]  # a database server: nothing of ours still runs
    assert "unfinished job" not in output
    assert "SIGTERM" not in output and "aborting now" not in output, output[-4000:]
    assert "moved to" not in output  # no other worker: nothing moved anywhere
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'ctrl-c-drain'") == "offline"


def test_a_second_ctrl_c_stops_now_and_claims_no_moves(run_command, enqueue):
    command = run_command("ctrl-c-abort")
    job = enqueue("noop", {"seconds": 60})
    wait_for(lambda: task_of(job)[0] == "running", 20, "the stage to run")
    command.ctrl_c()
    wait_for(
        lambda: one("SELECT lifecycle FROM queue_workers WHERE uid = 'ctrl-c-abort'") == "draining",
        10,
        "the worker to drain",
    )
    command.ctrl_c()
    command.popen.wait(30)
    output = command.output()
    assert "Ctrl-C again: stopping now" in output, output[-4000:]
    assert "Ctrl-C again: aborting now (stages killed and handed back)" in output, output[-4000:]
    assert "moved to" not in output and "SIGTERM" not in output, output[-4000:]
    assert output.splitlines()[-2:] == [
        "1 unfinished job(s) wait in the queue; the next start resumes them.",
        "JetEncode stopped.",
    ]
    assert task_of(job) == ["pending", "0"]  # handed back at once, no attempt used


def stages(job):
    """(placement, state, execution) of each of the job's tasks, in order."""
    rows = one(
        "SELECT array_agg(ARRAY[placement, state, execution_id::text] ORDER BY id) FROM queue_tasks "
        "WHERE job_id = %s",
        [job],
    )
    return [tuple(row) for row in rows]


def test_a_job_caught_between_stages_resumes_from_its_completed_stages(run_command, enqueue):
    # The dispatch spawns two 1.5-second stages; one slot runs them one after the other.
    first = run_command("resumer")
    job = enqueue("noop", {"seconds": 1.5, "children": 2})
    wait_for(
        lambda: [s[1] for s in stages(job)] == ["completed", "running", "pending"],
        30,
        "the first stage to run",
    )
    first.ctrl_c()  # the running stage finishes in the drain; the second one waits
    assert first.popen.wait(60) == 0, first.output()[-4000:]
    assert stages(job) == [("dispatch", "completed", "1"), ("job", "completed", "1"), ("job", "pending", "1")]
    progress = one("SELECT progress FROM jobs WHERE id = %s", [job])
    assert progress > 0
    second = run_command("resumer")  # ./scripts/run again: the same uid
    wait_for(
        lambda: one("SELECT status FROM jobs WHERE id = %s", [job]) == "completed", 30, "the job to finish"
    )
    # Same execution, nothing redone: the completed stages were not run again.
    assert stages(job) == [
        ("dispatch", "completed", "1"),
        ("job", "completed", "1"),
        ("job", "completed", "1"),
    ]
    assert "restarted (previous session" in second.output()
    assert "fenced out" not in second.output()
    second.ctrl_c()
    assert second.popen.wait(60) == 0
