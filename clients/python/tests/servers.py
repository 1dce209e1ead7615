"""The servers the tests run against, started by the Rust driver (tests/client_python.rs):
REDIS_PORT (one server, loaded with ``bucket-ms 100``), REDIS_HELD_PORT (one that holds fold
credits) and REDIS_CLUSTER_PORT (a node of a 3-master cluster)."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

PORT = int(os.environ.get("REDIS_PORT", "6379"))
CLUSTER_PORT = int(os.environ.get("REDIS_CLUSTER_PORT", "0"))
HELD_PORT = int(os.environ.get("REDIS_HELD_PORT", "0"))
"""A server loaded with ``debug-hold-credits yes``: a shrink's folds never land there."""
BUCKET_MS = 100


def fresh(name: str) -> str:
    """A key no other test uses."""
    return f"{name}:{uuid.uuid4().hex[:8]}"


def watermark_ms(ago_buckets: int = 1) -> int:
    """A bucket boundary ``ago_buckets`` buckets before the current one."""
    now = int(time.time() * 1000)
    return (now // BUCKET_MS - ago_buckets) * BUCKET_MS


def info_stat(client: Any, field: str) -> int:
    """A field of the server's ``INFO ctr``."""
    return int(client.info("ctr")[field])
