"""A small TCP proxy on 127.0.0.1 for fault tests: it counts the connections
a client opens (so a test can tell a reconnecting worker from a spinning one)
and can pause the bytes in flight (a network that stalls without closing).

`TcpProxy(target_port)` forwards `127.0.0.1:<port>` to `127.0.0.1:<target_port>`:
    `start()` / `stop()`   also a context manager; `stop()` closes every connection
    `port`                 where it listens
    `connections`          connections accepted so far
    `refused`              of those, how many found the target not listening
    `pause()` / `resume()` hold / release every byte in both directions; while
                           paused, new connections are accepted but stall too
    `answer(response)`     close every connection; from then on each new one gets
                           `response` (raw bytes, e.g. an HTTP 503) instead of the
                           target, until `answer(None)`
    `bytes_from_target`    bytes the target sent through the proxy so far
    `drip(seconds, after)` from then on, past the first `after` bytes of each
                           connection, pass the target's bytes one at a time, one
                           every `seconds` (a store that answers, then trickles);
                           `drip(None)` lets them flow again
    `intercept(rule)`      close every connection; from then on each new one's first
                           request head (bytes up to the blank line) goes to
                           `rule(head)`: raw bytes to answer instead (then the
                           connection closes), or `None` to forward it, marked
                           `Connection: close` so that every request meets the rule;
                           `intercept(None)` ends it
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from types import TracebackType

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.connections = 0
        self.refused = 0
        self._lock = threading.Lock()
        self.bytes_from_target = 0
        self._answer: bytes | None = None
        self._drip: tuple[float, int] | None = None
        self._rule: Callable[[bytes], bytes | None] | None = None
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._flowing.set()
        # shutdown() wakes the accept() blocked in the proxy thread; close() alone may not.
        for sock in [self._listener, *self._snapshot()]:
            _close(sock)
        self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def drip(self, seconds: float | None, after: int = 0) -> None:
        self._drip = None if seconds is None else (seconds, after)

    def answer(self, response: bytes | None) -> None:
        self._answer = response
        for sock in self._snapshot():
            _close(sock)

    def intercept(self, rule: Callable[[bytes], bytes | None] | None) -> None:
        self._rule = rule
        for sock in self._snapshot():
            _close(sock)

    def _snapshot(self) -> list[socket.socket]:
        with self._lock:
            return list(self._sockets)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        response = self._answer
        if response is not None:
            with contextlib.suppress(OSError):
                client.settimeout(5)
                client.recv(_CHUNK)  # the request's head: answered without a look
                client.sendall(response)
            _close(client)
            return
        first = b""
        rule = self._rule
        if rule is not None:
            first = _read_head(client)
            head, _, rest = first.partition(b"\r\n\r\n")
            reply = rule(head)
            if reply is not None:
                with contextlib.suppress(OSError):
                    client.sendall(reply)
                _close(client)
                return
            lines = [
                line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")
            ]
            first = b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + rest
        try:
            upstream = socket.create_connection(self._target, timeout=5)
        except OSError:
            with self._lock:
                self.refused += 1
            _close(client)
            return
        upstream.settimeout(None)
        if first:
            with contextlib.suppress(OSError):
                upstream.sendall(first)
        with self._lock:
            self._sockets.update((client, upstream))
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        self._pump(upstream, client, from_target=True)

    def _pump(self, source: socket.socket, sink: socket.socket, from_target: bool = False) -> None:
        sent = 0
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                self._flowing.wait()
                if self._stopping.is_set():
                    break
                drip = self._drip if from_target else None
                if drip is None or sent + len(data) <= drip[1]:
                    sink.sendall(data)
                else:
                    free = max(0, drip[1] - sent)
                    sink.sendall(data[:free])
                    for at in range(free, len(data)):
                        if self._stopping.wait(drip[0]):
                            return
                        sink.sendall(data[at : at + 1])
                sent += len(data)
                if from_target:
                    with self._lock:
                        self.bytes_from_target += len(data)
        except OSError:
            pass  # a side closed: tear down both
        finally:
            for sock in (source, sink):
                _close(sock)
            with self._lock:
                self._sockets.difference_update((source, sink))


def _read_head(client: socket.socket) -> bytes:
    """Bytes from `client` up to and including the end of a request head (or EOF)."""
    data = b""
    with contextlib.suppress(OSError):
        client.settimeout(5)
        while b"\r\n\r\n" not in data:
            chunk = client.recv(_CHUNK)
            if not chunk:
                break
            data += chunk
        client.settimeout(None)
    return data


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
