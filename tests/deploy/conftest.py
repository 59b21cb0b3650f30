"""Fixtures for the deployment tests: a controllable TCP link to PostgreSQL (tests/kit/tcpproxy.py).
Worker processes come from the `start_worker` fixture of tests/conftest.py, given the proxy's
DATABASE_URL as an argument."""

from __future__ import annotations

import pytest

from tests.kit.tcpproxy import TcpProxy, proxy_target


@pytest.fixture
def make_proxy(database_url):
    """make_proxy() -> a started TcpProxy to this test run's PostgreSQL; all are closed at teardown."""
    proxies: list[TcpProxy] = []

    def make() -> TcpProxy:
        proxy = TcpProxy(proxy_target(database_url)).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()
