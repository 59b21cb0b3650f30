"""A TCP proxy a test controls: the network link between a worker and PostgreSQL.

    proxy = TcpProxy(("127.0.0.1", 5432))      # or TcpProxy("/tmp/.s.PGSQL.5432") for a Unix socket
    proxy.start()                              # listens on 127.0.0.1:<free port> (proxy.port)
    proxy.cut()                                # every connection is reset; new ones are refused
    proxy.restore()                            # listens again on the same port
    proxy.stall()                              # or: the link goes silent (packets lost, no error)
    proxy.restore()                            # everything held is delivered, late
    proxy.close()

`cut()` is a link that fails loudly: each forwarded connection gets a TCP reset (SO_LINGER 0) and
the listening socket is closed, so a reconnect fails with "connection refused" until `restore()`.
`stall()` is a link that fails silently, the way a partition usually looks: connections stay open
but no byte crosses in either direction and new connections hang; `restore()` delivers everything
that was held, so statements sent during the partition reach the server late.
Threads only, no asyncio: it runs next to pytest and Django without an event loop.
"""

from __future__ import annotations

import socket
import struct
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

Target = tuple[str, int] | str

_BUFFER = 64 * 1024


def _reset(sock: socket.socket) -> None:
    """Close with an RST rather than a FIN, and wake any thread blocked in recv() on it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class TcpProxy:
    def __init__(self, target: Target, host: str = "127.0.0.1", port: int = 0):
        self.target = target
        self.host = host
        self.port = port
        self.accepted = 0  # connections forwarded since start, all generations
        self.resets = 0  # connections reset by cut()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._stop: threading.Event | None = None
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._is_cut = False
        self._flowing = threading.Event()
        self._flowing.set()

    # --- control ----------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        with self._lock:
            self._listen()
        return self

    def cut(self) -> int:
        """Reset every forwarded connection and stop accepting. Returns how many were reset."""
        with self._lock:
            self._is_cut = True
            self._stop_listening()
            pairs, self._pairs = self._pairs, set()
            for client, upstream in pairs:
                _reset(client)
                _reset(upstream)
            self.resets += len(pairs)
            return len(pairs)

    def stall(self) -> None:
        """Stop delivering bytes, both ways, on every connection (new ones included)."""
        self._flowing.clear()

    def restore(self) -> None:
        """Undo cut() and stall(): listen again on the same port, deliver what was held."""
        with self._lock:
            if self._is_cut:
                self._is_cut = False
                self._listen()
        self._flowing.set()

    def close(self) -> None:
        self.cut()
        self._flowing.set()  # pumps held by stall() see their pair gone and end

    @property
    def is_cut(self) -> bool:
        return self._is_cut

    @property
    def is_stalled(self) -> bool:
        return not self._flowing.is_set()

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals (called with self._lock held) ---------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))  # port 0 the first time; the same port after a cut
        listener.listen(128)
        listener.settimeout(0.1)  # the accept loop notices a cut within 0.1 s
        self.port = listener.getsockname()[1]
        stop = threading.Event()
        self._listener, self._stop = listener, stop
        threading.Thread(
            target=self._accept_loop, args=(listener, stop), name=f"tcpproxy-{self.port}", daemon=True
        ).start()

    def _stop_listening(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._listener is not None:
            # shutdown() stops listening at once even while the accept thread polls the socket
            # (close() alone would leave it listening until that poll returns).
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()  # connects are refused from now on
        self._listener, self._stop = None, None

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self.target, str):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.settimeout(5)
        upstream.connect(self.target)
        upstream.settimeout(None)
        return upstream

    def _accept_loop(self, listener: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by cut()
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                upstream = self._connect_upstream()
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if stop.is_set():  # cut while we were connecting upstream
                    _reset(client)
                    _reset(upstream)
                    return
                pair = (client, upstream)
                self._pairs.add(pair)
                self.accepted += 1
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, source, sink), daemon=True).start()

    def _pump(self, pair, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_BUFFER)
                if not data:
                    break
                self._flowing.wait()  # stall(): hold the bytes until restore()
                if pair not in self._pairs:
                    break  # cut() while held
                sink.sendall(data)
        except OSError:
            pass
        # One side ended (or cut() reset both): end the other side too.
        with self._lock:
            mine = pair in self._pairs
            self._pairs.discard(pair)
        if mine:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


def proxy_target(database_url: str) -> Target:
    """Where the server named by a DATABASE_URL listens: (host, port), or a Unix socket path."""
    parts = urlsplit(database_url)
    socket_dir = parse_qs(parts.query).get("host", [None])[0]
    if socket_dir:  # the embedded server: postgresql://user@/name?host=/dir
        return str(Path(socket_dir) / f".s.PGSQL.{parts.port or 5432}")
    return (parts.hostname or "127.0.0.1", parts.port or 5432)


def via_proxy(database_url: str, proxy: TcpProxy) -> str:
    """The same URL (user, password, database) reached through `proxy` over TCP."""
    parts = urlsplit(database_url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{proxy.host}:{proxy.port}" if userinfo else f"{proxy.host}:{proxy.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
