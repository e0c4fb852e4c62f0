"""TCP proxies on loopback for the network-partition test: every broker advertises a proxy in
front of its listener, and a broker's ZooKeeper connection can go through one too, so a test can
cut a broker off from the others and from ZooKeeper while clients still reach it.

A broker proxy tells who connects by the client id of the first Kafka request (chronolog's
inter-broker connections name their broker: ``chronolog-replica-2``, ``chronolog-controller-1``,
``chronolog-shutdown-3``); a connection between an isolated broker and another broker is closed,
in either direction, and so are the ones already open when the isolation starts. Clients (other
client ids) pass. A ZooKeeper proxy, when cut, closes everything and accepts nothing.
"""

from __future__ import annotations

import re
import select
import socket
import struct
import threading
from typing import Callable

_BROKER_CLIENT = re.compile(rb"^chronolog-(?:replica|controller|shutdown)-(\d+)$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _client_id(first: bytes) -> bytes | None:
    """The client id of a Kafka request frame's header v1/v2, None when not all there yet."""
    if len(first) < 14:
        return None
    (length,) = struct.unpack_from(">h", first, 12)
    if length < 0:
        return b""
    if len(first) < 14 + length:
        return None
    return first[14 : 14 + length]


class Proxy:
    """Forwards 127.0.0.1:``port`` to ``target()`` (a function: the broker's port is known only
    once it started); ``allow(source_broker | None)`` decides per connection (re-checked on
    every chunk, so an isolation also cuts connections already open)."""

    def __init__(
        self,
        target: Callable[[], int],
        *,
        broker_id: int | None = None,
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self._target = target
        self.broker_id = broker_id  # None: a ZooKeeper proxy
        self.blocked: Callable[[int | None], bool] = lambda source: False
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._stop = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        source: int | None = None
        known = self.broker_id is None  # a ZooKeeper proxy has no Kafka frames to read
        if self.blocked(None) and self.broker_id is None:
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self._target()), timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._conns.update((client, upstream))
        pending = b""
        try:
            while not self._stop.is_set():
                if known and self.blocked(source):
                    return
                ready, _, _ = select.select([client, upstream], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        if not known:
                            pending += data
                            cid = _client_id(pending)
                            if cid is None:
                                continue
                            m = _BROKER_CLIENT.match(cid)
                            source = int(m.group(1)) if m else -1
                            known, data, pending = True, pending, b""
                            if self.blocked(source):
                                return
                        upstream.sendall(data)
                    else:
                        client.sendall(data)
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(client)
                self._conns.discard(upstream)
            for sock in (client, upstream):
                try:
                    sock.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        with self._lock:
            conns = list(self._conns)
        for sock in conns:
            try:
                sock.close()
            except OSError:
                pass


class Partition:
    """The proxies of a cluster and which broker is cut off."""

    def __init__(self) -> None:
        self.isolated: int | None = None
        self.brokers: dict[int, Proxy] = {}
        self.zookeepers: dict[int, Proxy] = {}

    def broker_proxy(self, broker_id: int, target: Callable[[], int]) -> Proxy:
        proxy = Proxy(target, broker_id=broker_id)
        # between the isolated broker and any other broker: nothing passes
        proxy.blocked = lambda source: self.isolated is not None and (
            (broker_id == self.isolated and source not in (None, -1, broker_id))
            or (source == self.isolated and broker_id != self.isolated)
        )
        self.brokers[broker_id] = proxy
        return proxy

    def zookeeper_proxy(self, broker_id: int, zk_port: int) -> Proxy:
        proxy = Proxy(lambda: zk_port)
        proxy.blocked = lambda source: self.isolated == broker_id
        self.zookeepers[broker_id] = proxy
        return proxy

    def isolate(self, broker_id: int) -> None:
        self.isolated = broker_id

    def heal(self) -> None:
        self.isolated = None

    def close(self) -> None:
        for proxy in [*self.brokers.values(), *self.zookeepers.values()]:
            proxy.close()
