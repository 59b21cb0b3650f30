"""Ctrl-C in the terminal of `./scripts/run` (`manage.py runall`): SIGINT to the whole process group
of the run command drains the worker once; a second Ctrl-C aborts. Real processes, real signals."""

import os
import signal
import socket
import subprocess
import sys
import time

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

    def __init__(self, env, log_path, uid):
        self.log_path = log_path
        self.uid = uid
        with open(log_path, "wb") as handle:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "manage.py",
                    "runall",
                    "--no-demo",
                    "--bind",
                    f"127.0.0.1:{free_port()}",
                    "--worker-args",
                    f"--uid {uid} --concurrency 1",
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

    def worker_pid(self) -> int | None:
        return one("SELECT pid FROM queue_workers WHERE uid = %s AND lifecycle = 'active'", [self.uid])

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

    def start(uid):
        command = RunCommand(worker_env, tmp_path / f"runall-{uid}.log", uid)
        started.append(command)
        wait_for(command.worker_pid, 90, "the worker of runall to register")
        wait_for(lambda: "ready" in command.output(), 30, "the worker to be ready")
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


def test_one_ctrl_c_to_the_run_commands_group_drains_the_worker(run_command, enqueue):
    command = run_command("ctrl-c-drain")
    job = enqueue("noop", {"seconds": 2})
    wait_for(lambda: task_of(job)[0] == "running", 20, "the stage to run")
    command.ctrl_c()
    assert command.popen.wait(60) == 0, command.output()[-4000:]
    assert task_of(job) == ["completed", "1"], command.output()[-4000:]  # it finished: drained, not aborted
    output = command.output()
    assert output.count("SIGTERM: draining") == 1, output[-4000:]
    assert "aborting now" not in output
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'ctrl-c-drain'") == "offline"


def test_a_second_ctrl_c_aborts_the_drain(run_command, enqueue):
    command = run_command("ctrl-c-abort")
    job = enqueue("noop", {"seconds": 60})
    wait_for(lambda: task_of(job)[0] == "running", 20, "the stage to run")
    command.ctrl_c()
    wait_for(
        lambda: one("SELECT lifecycle FROM queue_workers WHERE uid = 'ctrl-c-abort'") == "draining",
        10,
        "the worker to drain",
    )
    time.sleep(0.3)
    command.ctrl_c()
    command.popen.wait(30)
    assert "aborting now" in command.output(), command.output()[-4000:]
    assert task_of(job) == ["pending", "0"]  # handed back at once, no attempt used
