"""The shapes of the map replies, as the library returns them whatever the protocol."""

from __future__ import annotations

from typing import List, Optional, TypedDict


class CounterInfo(TypedDict, total=False):
    """``CTR.INFO``: one entry per field the server replies (str keys, str text values).

    ``holders``, ``holder_values`` and ``holder_ages_ms`` are present on the home key of a
    spread counter only (``value`` is then the total); ``headroom``, ``holder_floors``,
    ``holder_budgets``, ``units_in_flight`` and ``holder_refused_units`` on the home of a
    floored spread counter read on one server (``floor`` is then the counter's floor). Fields a newer module adds are kept as
    the server sends them."""

    value: int
    floor: Optional[int]
    shards: int
    shard_values: List[int]
    budgets: Optional[List[int]]
    ceiling: Optional[int]
    ceiling_budgets: Optional[List[int]]
    add_rate: int
    tokens: int
    ledger: int
    duplicates_ignored: int
    bucket_count: int
    last_watermark: Optional[int]
    last_drift: Optional[int]
    total_abs_drift: int
    reconciles: int
    window_ms: Optional[int]
    window_buckets: Optional[int]
    encoding: str
    holders: List[str]
    holder_values: List[int]
    holder_ages_ms: List[int]
    headroom: int
    holder_floors: List[int]
    holder_budgets: List[int]
    units_in_flight: int
    holder_refused_units: List[int]


class PncReplica(TypedDict):
    """One replica id's slot in a PN-counter: its positive and negative totals."""

    id: str
    p: int
    n: int


_PncSlots = TypedDict(
    "_PncSlots",
    {"value": int, "replica-id": Optional[str], "home": Optional[str], "replicas": List[PncReplica]},
)
_PncBound = TypedDict(
    "_PncBound",
    {"floor": Optional[int], "floor-level": int, "rights": int, "refused": int},
    total=False,
)


class PncInfo(_PncSlots, _PncBound):
    """``PNC.INFO``: the value, this deployment's replica id, the id of the last local write to
    the key, and every replica id's slot, sorted by id; on a bounded counter also the floor in
    force (None when removed), its level, this deployment's rights and the units refused here."""
