"""The test proxy itself: forwards PostgreSQL, cuts every connection, refuses new ones, restores."""

import threading

import psycopg
import pytest

from tests.kit.tcpproxy import via_proxy

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(60)]


def test_it_forwards_cuts_and_restores(make_proxy, database_url):
    proxy = make_proxy()
    url = via_proxy(database_url, proxy)
    with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
        assert conn.execute("SELECT 41 + 1").fetchone() == (42,)
        assert proxy.open_connections == 1

        assert proxy.cut() == 1
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError, match="refused"):
        psycopg.connect(url, connect_timeout=5)

    port = proxy.port
    proxy.restore()
    assert proxy.port == port  # the worker's DATABASE_URL stays valid
    with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert proxy.accepted == 2


def test_a_stall_holds_statements_until_the_link_returns(make_proxy, database_url):
    proxy = make_proxy()
    url = via_proxy(database_url, proxy)
    with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
        proxy.stall()
        answers = []
        thread = threading.Thread(target=lambda: answers.append(conn.execute("SELECT now()").fetchone()))
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and not answers  # no error, no answer: a silent link

        proxy.restore()
        thread.join(5.0)
        assert answers  # delivered late, as PostgreSQL saw it
