"""The clean topics' key partition must be the one Kafka's default partitioner picks (aiokafka's
byte-by-byte murmur2 is the independent reference here), or a key's events would change partition."""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.partitioner import murmur2 as reference_murmur2

from runtime.key_partition import key_partition, key_partitions, murmur2


@pytest.mark.parametrize("length", range(0, 70))
def test_murmur2_equals_the_java_clients_hash_for_every_tail_length(length: int) -> None:
    rng = random.Random(length)
    for _ in range(50):
        data = rng.randbytes(length)
        assert murmur2(data) == reference_murmur2(data) & 0xFFFFFFFF


def test_key_partition_is_the_default_partitioners_choice() -> None:
    rng = random.Random(3)
    partitioner = DefaultPartitioner()
    for count in (1, 3, 12, 50):
        partitions = list(range(count))
        for _ in range(300):
            key = rng.randbytes(rng.randrange(1, 120))
            assert key_partition(key, count) == partitioner(key, partitions, partitions)


@pytest.mark.parametrize(
    ("text", "java"),
    [
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_values_of_the_java_clients_utils_murmur2(text: str, java: int) -> None:
    assert murmur2(text.encode()) == java & 0xFFFFFFFF


def test_a_batch_of_keys_gets_the_same_partitions_as_one_by_one() -> None:
    rng = random.Random(9)
    # many keys of a few lengths (hashed as columns) and a tail of odd lengths (hashed one by one)
    keys = [rng.randbytes(rng.choice((5, 36, 61, 62, 63, 64))) for _ in range(3000)]
    keys += [rng.randbytes(rng.randrange(0, 100)) for _ in range(300)]
    rng.shuffle(keys)
    for count in (1, 7, 12):
        assert key_partitions(keys, count) == [key_partition(key, count) for key in keys]
    assert key_partitions([], 12) == []
