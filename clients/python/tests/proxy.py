"""A TCP proxy in front of a server that drops chosen replies: it forwards a command, lets the
server apply it, then closes the client's connection instead of passing the reply on (a reply
lost after the write happened: what a timeout or a network cut looks like to a client)."""

from __future__ import annotations

import socket
import threading


class _Proxy:
    """A TCP proxy on a free loopback port: each connection a client makes is paired with one
    to the server at ``upstream_port``, and :meth:`_serve` runs the pair. Subclasses set their
    own fields before calling ``__init__`` (it starts accepting)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._serve(client, server)

    def _serve(self, client: socket.socket, server: socket.socket) -> None:
        raise NotImplementedError


class ReplyDroppingProxy(_Proxy):
    def __init__(self, upstream_port: int, marker: bytes, drops: int) -> None:
        self.marker = marker
        self.drops_left = drops
        self.dropped = 0
        super().__init__(upstream_port)

    def _serve(self, client: socket.socket, server: socket.socket) -> None:
        state = {"drop_reply": False}
        threading.Thread(target=self._requests, args=(client, server, state), daemon=True).start()
        threading.Thread(target=self._replies, args=(server, client, state), daemon=True).start()

    def _take_drop(self) -> bool:
        with self._lock:
            if self.drops_left > 0:
                self.drops_left -= 1
                return True
            return False

    def _requests(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := client.recv(65536):
                # Decided before forwarding, so the reply cannot overtake the decision.
                if self.marker in data and self._take_drop():
                    state["drop_reply"] = True
                server.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def _replies(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := server.recv(65536):
                if state["drop_reply"]:
                    with self._lock:
                        self.dropped += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client, server)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


class TryAgainProxy(_Proxy):
    """A TCP proxy in front of a server that answers chosen commands itself with
    ``-TRYAGAIN budget in flight ...`` (what a holder whose share of the room is still on its
    way answers past the server's own wait), never passing them on: a request that contains
    ``marker`` (match a key exactly with its RESP bulk string, :func:`bulk`) is answered so
    ``replies`` times; the others, and those after, go to the server."""

    def __init__(self, upstream_port: int, marker: bytes, replies: int) -> None:
        self.marker = marker
        self.replies_left = replies
        self.answered = 0
        super().__init__(upstream_port)

    def _serve(self, client: socket.socket, server: socket.socket) -> None:
        threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
        threading.Thread(target=_forward, args=(server, client), daemon=True).start()

    def _take(self) -> bool:
        with self._lock:
            if self.replies_left > 0:
                self.replies_left -= 1
                self.answered += 1
                return True
            return False

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                # redis-py sends one command and waits for its reply: nothing of the server's
                # is on its way to this connection while the proxy answers.
                if self.marker in data and b"CTR.ADD" in data.upper() and self._take():
                    client.sendall(b"-TRYAGAIN budget in flight (injected by the test proxy)\r\n")
                    continue
                server.sendall(data)
        except OSError:
            pass
        _close(client, server)


def bulk(key: str) -> bytes:
    """``key`` as a RESP bulk string (``$len\\r\\nkey\\r\\n``): a marker that matches that key
    alone, not a longer name containing it."""
    data = key.encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _forward(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    _close(source, sink)
