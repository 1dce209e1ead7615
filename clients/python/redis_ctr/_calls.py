"""Each command once: its arguments and how its reply is normalised.

The sync and asyncio clients only send a :class:`Call` and hand the raw reply to its parser, so
both behave the same whatever the protocol (RESP2 flat arrays or RESP3 maps) and whatever
``decode_responses`` the redis-py client was made with.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, List, Literal, NamedTuple, Optional, TypeVar, Union

from redis.client import NEVER_DECODE

from .types import CounterInfo, PncInfo, PncReplica

T = TypeVar("T")
KeyT = Union[str, bytes]
Source = Literal["STREAM", "ZSET", "SET"]


class Reconciled(NamedTuple):
    """The reply of ``CTR.RECONCILE``."""

    value: int
    """The counter's value after the repair."""
    drift: int
    """What the counter held for events up to the watermark minus the truth (positive: it ran
    high)."""


class Increxed(NamedTuple):
    """The reply of ``CTR.INCREX``."""

    value: int
    """The counter's value after the call (the current one when the call was skipped)."""
    applied: int
    """The increment applied: 0 when the result fell outside the bounds and nothing changed;
    the clamped delta with ``saturate``."""


class Throttled(NamedTuple):
    """The reply of ``CTR.THROTTLE`` (redis-cell's ``CL.THROTTLE`` reply)."""

    limited: bool
    """True when the call was refused (nothing consumed)."""
    limit: int
    """``max_burst + 1``."""
    remaining: int
    """Units that could be taken right now."""
    retry_after: int
    """Seconds until a refused call would be allowed; -1 when allowed (or never)."""
    reset_after: int
    """Seconds until the limiter is back at its full burst."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One command: its arguments, redis-py options, and the parser of its reply."""

    args: tuple[Any, ...]
    parse: Callable[[Any], T]
    options: dict[str, Any] = field(default_factory=dict)
    write: bool = False
    """A command that changes the counter: sent once, never resent by redis-py's retry after
    its reply timed out (each copy the server read would run; see :mod:`redis_ctr._once`)."""

    def on(self, key: KeyT) -> Call[T]:
        """The same command on another key (a holder of a spread counter)."""
        return Call((self.args[0], key, *self.args[2:]), self.parse, self.options, self.write)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _optional_text(value: Any) -> Optional[str]:
    return None if value is None else _text(value)


def _as_map(raw: Any) -> dict[str, Any]:
    """A RESP3 map (dict) or a RESP2 flat ``[field, value, ...]`` array, with str keys."""
    if isinstance(raw, dict):
        return {_text(k): v for k, v in raw.items()}
    if isinstance(raw, (list, tuple)) and len(raw) % 2 == 0:
        return {_text(raw[i]): raw[i + 1] for i in range(0, len(raw), 2)}
    raise TypeError(f"expected a map reply, got {raw!r}")


def _plain(value: Any) -> Any:
    """bytes as str, recursively in lists (integers and nil stay as they are)."""
    if isinstance(value, (bytes, str)):
        return _text(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _int(raw: Any) -> int:
    return int(raw)


def _optional_int(raw: Any) -> Optional[int]:
    return None if raw is None else int(raw)


def _ints(raw: Any) -> List[int]:
    return [int(v) for v in raw]


def _ok(raw: Any) -> None:
    if raw not in (True, b"OK", "OK"):
        raise TypeError(f"expected OK, got {raw!r}")


def _increxed(raw: Any) -> Increxed:
    return Increxed(_int(raw[0]), _int(raw[1]))


def _reconciled(raw: Any) -> Reconciled:
    value, drift = raw
    return Reconciled(int(value), int(drift))


def _counter_info(raw: Any) -> Optional[CounterInfo]:
    if raw is None:
        return None
    info: dict[str, Any] = {name: _plain(v) for name, v in _as_map(raw).items()}
    return info  # type: ignore[return-value]


def _throttled(raw: Any) -> Throttled:
    limited, limit, remaining, retry_after, reset_after = (int(v) for v in raw)
    return Throttled(bool(limited), limit, remaining, retry_after, reset_after)


def _pnc_replica(raw: Any) -> PncReplica:
    entry = _as_map(raw)
    return {"id": _text(entry["id"]), "p": int(entry["p"]), "n": int(entry["n"])}


def _pnc_info(raw: Any) -> PncInfo:
    info = _as_map(raw)
    out: PncInfo = {
        "value": int(info["value"]),
        "replica-id": _optional_text(info.get("replica-id")),
        "home": _optional_text(info.get("home")),
        "replicas": [_pnc_replica(r) for r in info.get("replicas") or []],
    }
    # A bounded counter's fields (PNC.FLOOR, PNC.GIVE or a tokened PNC.DECRFLOOR touched it).
    if "rights" in info:
        out["floor"] = _optional_int(info.get("floor"))
        out["floor-level"] = int(info["floor-level"])
        out["rights"] = int(info["rights"])
        out["refused"] = int(info["refused"])
    return out


def _optional_bytes(raw: Any) -> Optional[bytes]:
    return None if raw is None else bytes(raw)


def integer(name: str, value: Any) -> int:
    """``value`` as a plain int, or ``TypeError`` at the call when it is not an integer: a
    float, a ``Decimal``, a str, a bool (an ``int`` subclass, but never meant as an amount).
    Integer types that say so (``__index__``: numpy's integers) are taken."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None


def _token_and_time(token: Optional[KeyT], at: Optional[int]) -> list[Any]:
    args: list[Any] = []
    if token is not None:
        args += ["TOKEN", token]
    if at is not None:
        args += ["AT", integer("at", at)]
    return args


def expiry(
    ex: Optional[int] = None,
    px: Optional[int] = None,
    exat: Optional[int] = None,
    pxat: Optional[int] = None,
    persist: bool = False,
    enx: bool = False,
    checked: bool = False,
) -> list[Any]:
    """The expiry options of ``CTR.ADD`` and ``CTR.INCREX`` as arguments. ``checked``: a
    combination the module refuses (two of ``ex``/``px``/``exat``/``pxat``/``persist``,
    ``enx`` without a time or with ``persist``) raises ``ValueError`` here, before any I/O."""
    times = (("EX", ex), ("PX", px), ("EXAT", exat), ("PXAT", pxat))
    args: list[Any] = []
    for name, value in times:
        if value is not None:
            args += [name, integer(name.lower(), value)]
    if persist:
        args.append("PERSIST")
    if checked:
        given = [name.lower() for name, value in times if value is not None]
        if persist:
            given.append("persist")
        if len(given) > 1:
            both = " and ".join(given)
            raise ValueError(f"at most one of ex, px, exat, pxat and persist: {both} given")
        if enx and (not given or persist):
            raise ValueError("enx needs one of ex, px, exat or pxat")
    if enx:
        args.append("ENX")
    return args


def changes_ttl(
    ex: Optional[int],
    px: Optional[int],
    exat: Optional[int],
    pxat: Optional[int],
    persist: bool,
    enx: bool,
) -> bool:
    """True for an add that may set or remove its key's TTL: on a spread counter it goes to
    the home key (a TTL set on a holder would expire that holder alone)."""
    return bool(persist or enx) or any(value is not None for value in (ex, px, exat, pxat))


def add(
    key: KeyT,
    delta: int,
    token: Optional[KeyT] = None,
    at: Optional[int] = None,
    ex: Optional[int] = None,
    px: Optional[int] = None,
    exat: Optional[int] = None,
    pxat: Optional[int] = None,
    persist: bool = False,
    enx: bool = False,
) -> Call[Optional[int]]:
    args: list[Any] = ["CTR.ADD", key, integer("delta", delta), *_token_and_time(token, at)]
    args += expiry(ex, px, exat, pxat, persist, enx, checked=True)
    return Call(tuple(args), _optional_int, write=True)


def get(key: KeyT) -> Call[int]:
    return Call(("CTR.GET", key), _int)


def mget(keys: tuple[KeyT, ...]) -> Call[List[int]]:
    return Call(("CTR.MGET", *keys), _ints)


def clear(key: KeyT, token: Optional[KeyT] = None) -> Call[int]:
    return Call(("CTR.CLEAR", key, *_token_and_time(token, None)), _int, write=True)


def floor(key: KeyT, floor: Optional[int]) -> Call[None]:
    floor_arg = "NONE" if floor is None else integer("floor", floor)
    return Call(("CTR.FLOOR", key, floor_arg), _ok, write=True)


def ceil(key: KeyT, ceiling: Optional[int]) -> Call[None]:
    return Call(
        ("CTR.CEIL", key, "NONE" if ceiling is None else integer("ceiling", ceiling)), _ok, write=True
    )


def increx(
    key: KeyT,
    by: int = 1,
    lbound: Optional[int] = None,
    ubound: Optional[int] = None,
    saturate: bool = False,
    ex: Optional[int] = None,
    px: Optional[int] = None,
    exat: Optional[int] = None,
    pxat: Optional[int] = None,
    persist: bool = False,
    enx: bool = False,
    token: Optional[KeyT] = None,
    at: Optional[int] = None,
) -> Call[Increxed]:
    args: list[Any] = ["CTR.INCREX", key, "BYINT", integer("by", by)]
    for name, value in (("LBOUND", lbound), ("UBOUND", ubound)):
        if value is not None:
            args += [name, integer(name.lower(), value)]
    if saturate:
        args.append("SATURATE")
    args += expiry(ex, px, exat, pxat, persist, enx)
    return Call((*args, *_token_and_time(token, at)), _increxed, write=True)


def refund(key: KeyT, token: KeyT) -> Call[Optional[int]]:
    return Call(("CTR.REFUND", key, "TOKEN", token), _optional_int, write=True)


def decrfloor(
    key: KeyT, amount: int, token: Optional[KeyT] = None, at: Optional[int] = None
) -> Call[Optional[int]]:
    args = ("CTR.DECRFLOOR", key, integer("amount", amount), *_token_and_time(token, at))
    return Call(args, _optional_int, write=True)


def reconcile(key: KeyT, truth: int, at: Optional[int] = None) -> Call[Reconciled]:
    args = ("CTR.RECONCILE", key, integer("truth", truth), *_token_and_time(None, at))
    return Call(args, _reconciled, write=True)


def reconcile_from(
    key: KeyT, kind: Source, source: KeyT, at: Optional[int] = None
) -> Call[Reconciled]:
    args = ("CTR.RECONCILE", key, "FROM", kind, source, *_token_and_time(None, at))
    return Call(args, _reconciled, write=True)


def reconcile_start(key: KeyT) -> Call[int]:
    return Call(("CTR.RECONCILE", key, "START"), _int, write=True)


def throttle(
    key: KeyT,
    max_burst: int,
    count: int,
    period: int,
    quantity: int = 1,
    token: Optional[KeyT] = None,
    at: Optional[int] = None,
) -> Call[Throttled]:
    args = (
        "CTR.THROTTLE",
        key,
        integer("max_burst", max_burst),
        integer("count", count),
        integer("period", period),
        integer("quantity", quantity),
        *_token_and_time(token, at),
    )
    return Call(args, _throttled)


def window(key: KeyT, window_ms: Optional[int], buckets: Optional[int] = None) -> Call[None]:
    if window_ms is None:
        return Call(("CTR.WINDOW", key, "NONE"), _ok, write=True)
    args: list[Any] = ["CTR.WINDOW", key, integer("window_ms", window_ms)]
    if buckets is not None:
        args += ["BUCKETS", integer("buckets", buckets)]
    return Call(tuple(args), _ok, write=True)


def _names(raw: Any) -> List[str]:
    return [_text(name) for name in raw]


def _bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _byte_names(raw: Any) -> List[bytes]:
    return [_bytes(name) for name in raw]


def names_parser(key: KeyT) -> Callable[[Any], List[Any]]:
    """How holder names are returned: in the type of the key given (str for a str key, bytes
    for a bytes key), whatever ``decode_responses`` says."""
    return _byte_names if isinstance(key, bytes) else _names


def spread(key: KeyT, holders: int) -> Call[List[Any]]:
    options = {} if isinstance(key, str) else {NEVER_DECODE: True}
    args = ("CTR.SPREAD", key, integer("holders", holders))
    return Call(args, names_parser(key), options, write=True)


def holders(key: KeyT, at: Optional[int] = None) -> Call[List[str]]:
    """``CTR.HOLDERS key``, or with ``at`` the holders in force at that time (``AT ms``)."""
    return Call(("CTR.HOLDERS", key, *_token_and_time(None, at)), _names)


def info(key: KeyT) -> Call[Optional[CounterInfo]]:
    return Call(("CTR.INFO", key), _counter_info)


def pnc_add(key: KeyT, delta: int) -> Call[int]:
    return Call(("PNC.ADD", key, integer("delta", delta)), _int, write=True)


def pnc_get(key: KeyT) -> Call[int]:
    return Call(("PNC.GET", key), _int)


def pnc_state(key: KeyT) -> Call[Optional[bytes]]:
    # A binary blob: never decoded, whatever decode_responses says.
    return Call(("PNC.STATE", key), _optional_bytes, {NEVER_DECODE: True})


def pnc_merge(key: KeyT, state: bytes) -> Call[int]:
    return Call(("PNC.MERGE", key, state), _int, write=True)


def pnc_clear(key: KeyT) -> Call[int]:
    return Call(("PNC.CLEAR", key), _int, write=True)


def pnc_info(key: KeyT) -> Call[PncInfo]:
    return Call(("PNC.INFO", key), _pnc_info)


def pnc_floor(key: KeyT, floor: Optional[int]) -> Call[None]:
    return Call(("PNC.FLOOR", key, "NONE" if floor is None else integer("floor", floor)), _ok)


def pnc_decrfloor(key: KeyT, amount: int, token: Optional[KeyT] = None) -> Call[Optional[int]]:
    args = ("PNC.DECRFLOOR", key, integer("amount", amount), *_token_and_time(token, None))
    return Call(args, _optional_int)


def pnc_give(key: KeyT, to_replica: KeyT, amount: int) -> Call[Optional[int]]:
    return Call(("PNC.GIVE", key, to_replica, integer("amount", amount)), _optional_int)
