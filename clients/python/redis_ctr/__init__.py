"""redis-ctr for Python: typed ``CTR.*`` and ``PNC.*`` commands on redis-py, with replies that
are the same under RESP2 and RESP3, the module's errors as exception classes, and a coalescing
writer.

>>> import redis, redis_ctr
>>> ctr = redis_ctr.Ctr(redis.Redis())
>>> ctr.add("orders:paid", 1, token="order-1001")
1
"""

from ._calls import Increxed, Reconciled, Throttled
from .client import Ctr, Pnc
from .pipeline import CtrPipeline
from .errors import (
    AboveCeiling,
    BadWatermark,
    BelowFloor,
    BudgetInFlight,
    CannotShrink,
    CeilingOnSpread,
    RefundAwaitsFold,
    RefundFolded,
    SourceMissing,
    CeilingRefused,
    HolderAway,
    HolderFolded,
    CounterOverflow,
    CtrError,
    CtrSyntaxError,
    FloorRefused,
    NotDurable,
    FlooredSpread,
    GatherInTransaction,
    HistoryMissing,
    HolderError,
    HolderMoving,
    HoldersAhead,
    HoldersUnreplicated,
    HoldersUnknown,
    InternalError,
    InvalidAmount,
    InvalidExpire,
    InvalidLimit,
    InvalidState,
    InvalidTime,
    InvalidToken,
    LateAdd,
    LimitRefused,
    NotAnInteger,
    NotPrimary,
    SpreadRefused,
    SpreadUnavailable,
    TokenTooOld,
    TooFarInFuture,
    TokenReused,
    TooManyReplicas,
    UseHomeKey,
    WrongType,
)
from ._spread import probe_order
from .types import CounterInfo, PncInfo, PncReplica
from .writer import CoalescingWriter, Undelivered, WriterFull, WriterStats

# Kept for code written before it moved: the asyncio writer is redis_ctr.asyncio's, next to
# AsyncCtr (this name stays an alias of the same class).
from .writer import AsyncCoalescingWriter

__all__ = [
    "AboveCeiling",
    "AsyncCoalescingWriter",
    "BadWatermark",
    "BelowFloor",
    "BudgetInFlight",
    "CannotShrink",
    "CeilingOnSpread",
    "RefundAwaitsFold",
    "RefundFolded",
    "SourceMissing",
    "CeilingRefused",
    "HolderAway",
    "HolderFolded",
    "CoalescingWriter",
    "CounterInfo",
    "CounterOverflow",
    "Ctr",
    "CtrError",
    "CtrPipeline",
    "CtrSyntaxError",
    "FloorRefused",
    "NotDurable",
    "FlooredSpread",
    "GatherInTransaction",
    "HistoryMissing",
    "HolderError",
    "HolderMoving",
    "HoldersAhead",
    "HoldersUnreplicated",
    "HoldersUnknown",
    "Increxed",
    "InternalError",
    "InvalidAmount",
    "InvalidExpire",
    "InvalidLimit",
    "InvalidState",
    "InvalidTime",
    "InvalidToken",
    "LateAdd",
    "LimitRefused",
    "NotAnInteger",
    "NotPrimary",
    "Pnc",
    "PncInfo",
    "PncReplica",
    "Reconciled",
    "Throttled",
    "SpreadRefused",
    "SpreadUnavailable",
    "TokenTooOld",
    "TooFarInFuture",
    "TokenReused",
    "TooManyReplicas",
    "UseHomeKey",
    "Undelivered",
    "WriterFull",
    "WriterStats",
    "WrongType",
    "probe_order",
]
