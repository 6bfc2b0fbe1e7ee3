"""runtime/kafka_proxy.py between a client and a small stand-in broker on loopback (no Kafka needed): the
broker's address in Metadata and FindCoordinator answers becomes the proxy's, other bytes pass unchanged,
and the faults cut where they say. The proxy in front of the real broker is in
tests/integration/test_worker_core.py (a commit whose answer never comes)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiokafka.protocol.coordination import FindCoordinatorResponse_v1
from aiokafka.protocol.metadata import MetadataResponse_v1

from runtime.kafka_proxy import END_TXN, FIND_COORDINATOR, METADATA, KafkaProxy

HOST = "127.0.0.1"


def compact(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data


@dataclass(slots=True)
class StandInBroker:
    """Answers Metadata v1, FindCoordinator v1 and v4 and EndTxn with canned responses that name itself
    (and another broker); remembers every request's (api key, correlation id)."""

    port: int = 0
    requests: list[tuple[int, int]] = field(default_factory=list)

    def answer(self, api_key: int, version: int) -> bytes:
        other = (2, HOST, self.port + 1, None)
        if api_key == METADATA:
            return MetadataResponse_v1([(1, HOST, self.port, "rack"), other], 1, []).encode()
        if api_key == FIND_COORDINATOR and version == 1:
            return FindCoordinatorResponse_v1(0, 0, None, 1, HOST, self.port).encode()
        if api_key == FIND_COORDINATOR:  # v4, flexible: header tags, then coordinators of several keys
            coordinators = b"".join(
                compact(key) + struct.pack(">i", node) + compact(HOST) + struct.pack(">ih", port, 0)
                + compact(None) + b"\x00"
                for key, node, port in (("tx-1", 1, self.port), ("tx-2", 2, self.port + 1))
            )  # fmt: skip
            return b"\x00" + struct.pack(">i", 0) + bytes([3]) + coordinators + b"\x00"
        return struct.pack(">ih", 0, 0)  # EndTxn v1: throttle, error code

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
                self.requests.append((api_key, correlation_id))
                body = struct.pack(">i", correlation_id) + self.answer(api_key, version)
                writer.write(struct.pack(">i", len(body)) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@asynccontextmanager
async def broker_and_proxy() -> AsyncIterator[tuple[StandInBroker, KafkaProxy]]:
    broker = StandInBroker()
    server = await asyncio.start_server(broker.serve, HOST, 0)
    broker.port = server.sockets[0].getsockname()[1]
    try:
        async with KafkaProxy(f"{HOST}:{broker.port}") as proxy:
            yield broker, proxy
    finally:
        server.close()
        await server.wait_closed()


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation_id = 0

    @classmethod
    async def connect(cls, proxy: KafkaProxy) -> Client:
        return cls(*await asyncio.open_connection(HOST, proxy.port))

    async def ask(self, api_key: int, version: int) -> bytes:
        """Send a request (header only, as far as the proxy cares) and read the answer's body."""
        self.correlation_id += 1
        frame = struct.pack(">hhih", api_key, version, self.correlation_id, 1) + b"c"
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        await self.writer.drain()
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), 5))[0]
        body = await self.reader.readexactly(size)
        assert struct.unpack_from(">i", body)[0] == self.correlation_id
        return body[4:]

    async def closed(self) -> bool:
        """Whether the proxy closed this connection (an EOF or a reset, not a timeout)."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


def test_the_brokers_own_address_in_metadata_and_coordinator_answers_becomes_the_proxys() -> None:
    async def main() -> None:
        async with broker_and_proxy() as (broker, proxy):
            client = await Client.connect(proxy)
            metadata = MetadataResponse_v1.decode(await client.ask(METADATA, 1))
            assert [tuple(b) for b in metadata.brokers] == [
                (1, HOST, proxy.port, "rack"),
                (2, HOST, broker.port + 1, None),  # another broker: not this proxy's
            ]
            coordinator = FindCoordinatorResponse_v1.decode(await client.ask(FIND_COORDINATOR, 1))
            assert (coordinator.host, coordinator.port) == (HOST, proxy.port)

            flexible = await client.ask(FIND_COORDINATOR, 4)
            expected = bytearray(broker.answer(FIND_COORDINATOR, 4))
            first_port = expected.index(struct.pack(">i", broker.port))
            struct.pack_into(">i", expected, first_port, proxy.port)
            assert flexible == bytes(expected)
            assert struct.pack(">i", broker.port + 1) in flexible
            client.close()

    asyncio.run(main())


def test_cut_after_forwards_the_request_withholds_its_answer_and_refuses_connections_for_a_while() -> None:
    async def main() -> None:
        async with broker_and_proxy() as (broker, proxy):
            bystander = await Client.connect(proxy)
            await bystander.ask(METADATA, 1)
            client = await Client.connect(proxy)
            fired = proxy.cut_after(END_TXN, refuse_s=1.0)
            client.correlation_id += 1
            frame = struct.pack(">hhih", END_TXN, 1, client.correlation_id, 0)
            client.writer.write(struct.pack(">i", len(frame)) + frame)
            await asyncio.wait_for(fired.wait(), 5)

            assert (END_TXN, client.correlation_id) in broker.requests, "the request was not forwarded"
            assert await client.closed(), "the answer came through"
            assert await bystander.closed(), "another connection was not cut"
            with pytest.raises(ConnectionRefusedError):  # as a stopped broker, not accepted and closed
                await Client.connect(proxy)
            await asyncio.sleep(1.0)
            again = await connected_within(proxy, 3.0)
            assert MetadataResponse_v1.decode(await again.ask(METADATA, 1)).brokers[0][2] == proxy.port
            again.close()

    asyncio.run(main())


async def connected_within(proxy: KafkaProxy, seconds: float) -> Client:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            return await Client.connect(proxy)
        except ConnectionRefusedError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


def test_with_the_broker_down_connects_are_refused_until_it_is_back_on_the_same_port() -> None:
    """A client must see the broker's absence as a refused connect (the broker not up yet), not as a
    connection accepted and closed at the first request (a TLS or SASL listener, to a client)."""

    async def main() -> None:
        broker = StandInBroker()
        server = await asyncio.start_server(broker.serve, HOST, 0)
        broker.port = server.sockets[0].getsockname()[1]
        async with KafkaProxy(f"{HOST}:{broker.port}") as proxy:
            port = proxy.port
            server.close()
            await server.wait_closed()
            first = await Client.connect(proxy)  # accepted before the proxy knew: closed at once
            assert await first.closed()
            with pytest.raises(ConnectionRefusedError):
                await Client.connect(proxy)
            server = await asyncio.start_server(broker.serve, HOST, broker.port)
            client = await connected_within(proxy, 3.0)
            assert proxy.port == port
            await client.ask(METADATA, 1)
            client.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_cut_before_drops_the_request() -> None:
    async def main() -> None:
        async with broker_and_proxy() as (broker, proxy):
            client = await Client.connect(proxy)
            fired = proxy.cut_before(END_TXN)
            client.writer.write(struct.pack(">i", 10) + struct.pack(">hhih", END_TXN, 1, 7, 0))
            await asyncio.wait_for(fired.wait(), 5)
            assert await client.closed()
            assert all(api_key != END_TXN for api_key, _ in broker.requests)
            after = await Client.connect(proxy)  # no refusal asked for
            await after.ask(METADATA, 1)
            after.close()

    asyncio.run(main())
