"""A TCP proxy in front of one Kafka broker, for faults no broker produces on demand: a connection cut
right after a chosen request (say, the commit of a transaction), so the client never learns its outcome.

Kafka clients connect to the addresses the broker advertises (in Metadata and FindCoordinator responses),
not to the one they were started with. The proxy therefore rewrites the port of the broker's own address
in those responses to its own, and every connection of a client started on ``bootstrap`` goes through
it. It listens on the broker's host, so only a port changes and no length in a response does. Other
brokers' addresses are left alone (one proxy per broker).

Faults, each for the next matching request on any connection:

- ``cut_after(api_key)``: the request is forwarded, its answer withheld, then every connection is cut:
  the request took effect, and the client cannot know it;
- ``cut_before(api_key)``: the request is dropped and every connection cut: it never took effect;
- ``cut_now()``: every connection cut at once.

After a cut, new connections are refused for ``refuse_s``: the client's retries fail too, for as long
as a test needs. Refused as a stopped broker refuses them: the proxy stops listening, so a connect fails
(ECONNREFUSED) instead of being accepted and closed, which a client reads as a TLS or SASL listener
(runtime.kafka_clients). The same when the broker behind it is down: the proxy stops listening until it
is back. Requests and responses are otherwise passed on byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

METADATA = 3
FIND_COORDINATOR = 10
END_TXN = 26
API_VERSIONS = 18
#: the first version of each rewritten API that uses the flexible encoding (compact fields, tags)
_FLEXIBLE_FROM = {METADATA: 9, FIND_COORDINATOR: 3}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ProxyError(RuntimeError):
    """A frame the proxy cannot read (it names the API and version)."""


@dataclass(slots=True)
class _Fault:
    api_key: int
    forward: bool
    refuse_s: float
    fired: asyncio.Event = field(default_factory=asyncio.Event)


class _Reader:
    """Kafka's primitive encodings, read from a response body; ``patch`` rewrites a port in place."""

    def __init__(self, body: bytearray, position: int, flexible: bool) -> None:
        self.body = body
        self.at = position
        self.flexible = flexible

    def int16(self) -> int:
        value: int = _I16.unpack_from(self.body, self.at)[0]
        self.at += 2
        return value

    def int32(self) -> int:
        value: int = _I32.unpack_from(self.body, self.at)[0]
        self.at += 4
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.body[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        size = self.uvarint() - 1 if self.flexible else self.int16()
        if size < 0:
            return None
        value = bytes(self.body[self.at : self.at + size]).decode()
        self.at += size
        return value

    def count(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.int32()

    def tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.at += self.uvarint()

    def port(self, host: str | None, upstream: tuple[str, int], replacement: int) -> None:
        """Read a port; the broker's own address gets the proxy's port."""
        if (host, _I32.unpack_from(self.body, self.at)[0]) == upstream:
            _I32.pack_into(self.body, self.at, replacement)
        self.at += 4


def rewrite_addresses(
    api_key: int, version: int, body: bytearray, upstream: tuple[str, int], port: int
) -> None:
    """Give the broker's address in a Metadata or FindCoordinator response (``body``: the whole frame
    after its size, header included) the proxy's ``port``, in place."""
    flexible = version >= _FLEXIBLE_FROM.get(api_key, 1 << 15)
    read = _Reader(body, 4 + (1 if flexible else 0), flexible)  # correlation id, header tags (always 0)
    if flexible and body[4] != 0:
        raise ProxyError(f"response of API {api_key} v{version} has header tags; not read")
    if api_key == METADATA:
        if version >= 3:
            read.int32()  # throttle_time_ms
        for _ in range(read.count()):
            read.int32()  # node_id
            host = read.string()
            read.port(host, upstream, port)
            if version >= 1:
                read.string()  # rack
            read.tags()
    elif api_key == FIND_COORDINATOR:
        if version >= 1:
            read.int32()  # throttle_time_ms
        if version >= 4:
            for _ in range(read.count()):
                read.string()  # key
                read.int32()  # node_id
                host = read.string()
                read.port(host, upstream, port)
                read.int16()  # error_code
                read.string()  # error_message
                read.tags()
            return
        read.int16()  # error_code
        if version >= 1:
            read.string()  # error_message
        read.int32()  # node_id
        host = read.string()
        read.port(host, upstream, port)


async def _frame(reader: asyncio.StreamReader) -> bytearray | None:
    """The next size-prefixed frame (without its size), or None at the end of the stream."""
    try:
        size = _I32.unpack(await reader.readexactly(4))[0]
        return bytearray(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class KafkaProxy:
    """A proxy of the broker at ``upstream`` ("host:port"); start it, then give clients ``bootstrap``."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self._server: asyncio.Server | None = None
        self.port = 0
        self._connections: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._faults: list[_Fault] = []
        self._refuse_until = 0.0
        self._host = self.upstream[0]
        #: the task that listens again once a refusal is over and the broker answers
        self._reopening: asyncio.Task[None] | None = None
        self._stopping = False
        #: connections accepted, and refused during a fault
        self.accepted = 0
        self.refused = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.upstream[0]}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self._host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Cut every connection and stop listening, once each connection's handler has ended."""
        self._stopping = True
        if self._reopening is not None:
            self._reopening.cancel()
            with contextlib.suppress(BaseException):
                await self._reopening
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._cut()
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=5)
        if server is not None:
            await server.wait_closed()

    async def __aenter__(self) -> KafkaProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def cut_after(self, api_key: int, *, refuse_s: float = 0.0) -> asyncio.Event:
        """At the next request of ``api_key``: forward it, withhold its answer, cut every connection and
        refuse new ones for ``refuse_s``. The event is set when that happened."""
        fault = _Fault(api_key, True, refuse_s)
        self._faults.append(fault)
        return fault.fired

    def cut_before(self, api_key: int, *, refuse_s: float = 0.0) -> asyncio.Event:
        """At the next request of ``api_key``: drop it, cut every connection, refuse new ones for
        ``refuse_s``."""
        fault = _Fault(api_key, False, refuse_s)
        self._faults.append(fault)
        return fault.fired

    def disarm(self, fired: asyncio.Event) -> bool:
        """Withdraw the fault whose event is ``fired`` if its request has not come yet (True when it was
        still pending)."""
        pending = [f for f in self._faults if f.fired is fired]
        for fault in pending:
            self._faults.remove(fault)
        return bool(pending)

    @property
    def refusing(self) -> bool:
        """Whether new connections are refused now (a fault's refusal, or the broker behind it down)."""
        return self._server is None and not self._stopping

    def cut_now(self, *, refuse_s: float = 0.0) -> None:
        self._refuse(refuse_s)
        self._cut()

    def _refuse(self, seconds: float) -> None:
        if seconds <= 0:
            return
        loop = asyncio.get_running_loop()
        self._refuse_until = max(self._refuse_until, loop.time() + seconds)
        self._stop_listening()

    def _stop_listening(self) -> None:
        """Close the listening socket (connects fail) until the refusal is over and the broker answers."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._reopening is None and not self._stopping:
            self._reopening = asyncio.ensure_future(self._listen_again())

    async def _listen_again(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not self._stopping:
                await asyncio.sleep(max(0.2, self._refuse_until - loop.time()))
                if loop.time() < self._refuse_until:
                    continue
                try:
                    _, probe = await asyncio.open_connection(*self.upstream)
                    probe.close()
                    await self.start()  # the same port
                    return
                except OSError:  # the broker still down, or the port not free yet: try again
                    continue
        finally:
            self._reopening = None

    def _cut(self) -> None:
        for writer in list(self._connections):
            writer.transport.abort()
        self._connections.clear()

    def _fire(self, fault: _Fault) -> None:
        log.info(
            "cutting every connection at API %d (refusing new ones for %.1f s)", fault.api_key, fault.refuse_s
        )
        self._refuse(fault.refuse_s)
        self._cut()
        fault.fired.set()

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            await self._carry(client_in, client_out)
        finally:
            self._handlers.discard(handler)

    async def _carry(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        """One client connection: refused during a fault, else joined to a connection to the broker."""
        if self._server is None or asyncio.get_running_loop().time() < self._refuse_until:
            self.refused += 1  # accepted just before the listening stopped
            client_out.transport.abort()
            return
        self.accepted += 1
        try:
            broker_in, broker_out = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_out.transport.abort()
            self._stop_listening()  # the broker is down: refuse as it would, until it is back
            return
        self._connections |= {client_out, broker_out}
        #: correlation id -> (api key, version, fault whose answer is withheld)
        asked: dict[int, tuple[int, int, _Fault | None]] = {}
        pumps = [
            asyncio.ensure_future(self._requests(client_in, broker_out, asked)),
            asyncio.ensure_future(self._responses(broker_in, client_out, asked)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (client_out, broker_out):
                self._connections.discard(writer)
                writer.transport.abort()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*pumps, return_exceptions=True)

    async def _requests(
        self,
        client_in: asyncio.StreamReader,
        broker_out: asyncio.StreamWriter,
        asked: dict[int, tuple[int, int, _Fault | None]],
    ) -> None:
        while (frame := await _frame(client_in)) is not None:
            api_key, version = _I16.unpack_from(frame, 0)[0], _I16.unpack_from(frame, 2)[0]
            correlation_id = _I32.unpack_from(frame, 4)[0]
            fault = next((f for f in self._faults if f.api_key == api_key), None)
            if fault is not None:
                self._faults.remove(fault)
                if not fault.forward:
                    self._fire(fault)
                    return
            asked[correlation_id] = (api_key, version, fault)
            broker_out.write(_I32.pack(len(frame)) + frame)
            await broker_out.drain()

    async def _responses(
        self,
        broker_in: asyncio.StreamReader,
        client_out: asyncio.StreamWriter,
        asked: dict[int, tuple[int, int, _Fault | None]],
    ) -> None:
        while (frame := await _frame(broker_in)) is not None:
            correlation_id = _I32.unpack_from(frame, 0)[0]
            api_key, version, fault = asked.pop(correlation_id, (-1, -1, None))
            if fault is not None:  # the answer the client must not get
                self._fire(fault)
                return
            if api_key in (METADATA, FIND_COORDINATOR):
                rewrite_addresses(api_key, version, frame, self.upstream, self.port)
            client_out.write(_I32.pack(len(frame)) + frame)
            await client_out.drain()
