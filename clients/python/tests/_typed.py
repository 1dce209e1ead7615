"""Typed doors to the parts of redis-py that carry no annotations (``execute_command``, and the
synchronous ``RedisCluster``'s node and slot look-ups), so that the tests type-check under
``mypy --strict``. Each calls through a name typed ``Any``, as redis_ctr/client.py ``run`` does;
nothing is added to or changed in what is sent."""

from __future__ import annotations

from typing import Any, List


def command(client: Any, *args: Any) -> Any:
    """``client.execute_command(*args)``: the reply (an awaitable one from an asyncio
    client)."""
    send: Any = client.execute_command
    return send(*args)


def node_of(cluster: Any, key: str) -> Any:
    """``cluster.get_node_from_key(key)``: the ``ClusterNode`` of the master serving ``key``."""
    find: Any = cluster.get_node_from_key
    return find(key)


def primaries(cluster: Any) -> List[Any]:
    """``cluster.get_primaries()``: the ``ClusterNode`` of every master."""
    nodes: List[Any] = cluster.get_primaries()
    return nodes


def keyslot(cluster: Any, key: str) -> int:
    """``cluster.keyslot(key)``: the slot of ``key``."""
    slot: int = cluster.keyslot(key)
    return slot
