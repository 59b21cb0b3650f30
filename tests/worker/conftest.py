"""The worker tests start real `manage.py runworker` processes with the `start_worker` fixture of
tests/conftest.py (tests/kit/workers.py: lease 4 s, heartbeat 1 s, recovery every 1 s, poll 0.5 s,
and the test stages of tests/kit/stages.py), so crash scenarios finish in seconds. Every process
started is killed (with what its stages left behind) before the test database is flushed."""
