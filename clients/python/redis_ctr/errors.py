"""The module's errors as exception classes.

Every class derives from :class:`CtrError`, itself a ``redis.exceptions.ResponseError``, so code
that already catches redis-py's ``ResponseError`` keeps working. A server error that is not one
of the module's (or is a newer one this library does not know) stays a plain ``ResponseError``.

The mapping is one table, :data:`ERROR_TABLE`: the stable start of each of the module's error
texts, with its code (``ERR``, ``TRYAGAIN``, ``WRONGTYPE``, ``CLUSTERDOWN``; redis-py strips
some of them, :func:`classify` puts them back), and its class. The test suite checks it against
every error text in the module's source, so a new module error cannot go unmapped.
"""

from __future__ import annotations

import re
from typing import Optional, Tuple

from redis.exceptions import ClusterDownError, ClusterError, ConnectionError, RedisError
from redis.exceptions import ResponseError
from redis.exceptions import TryAgainError


class CtrError(ResponseError):
    """An error replied by the redis-ctr module."""


class CounterOverflow(CtrError):
    """The result would leave the signed 64-bit range; nothing changed."""


class BelowFloor(CtrError):
    """The value would be, or already is, below the counter's floor; nothing changed. Also
    ``CTR.CLEAR`` of a counter whose floor is above 0 (0 would be below it: lower the floor
    first)."""


class AboveCeiling(CtrError):
    """The value would be, or already is, above the counter's ceiling (``CTR.CEIL`` below the
    value, ``CTR.CLEAR`` of a counter whose ceiling is below 0); nothing changed."""


class CeilingRefused(AboveCeiling):
    """``add`` of a positive delta that the counter's ceiling refused (the server replied nil;
    nothing changed; with a token, the refusal is remembered). Raised by
    :meth:`redis_ctr.Ctr.add` unless it is called with ``refusable=True``, which returns None
    instead. Not an error text of the module: the library's reading of that nil."""


class CeilingOnSpread(CtrError):
    """A ceiling, or one key's bounds, on a spread counter: ``CTR.CEIL`` on a spread home or
    holder (a spread counter's ceiling is set before it spreads: its members keep shares of it),
    ``CTR.CLEAR`` or ``CTR.RECONCILE`` of a ceiled spread counter (shrink it to 1 first),
    ``CTR.INCREX`` on a spread counter (add to it with ``CTR.ADD``). Nothing changed."""


class RefundFolded(CtrError):
    """``CTR.REFUND`` of a grant made by a spread counter's holder that a shrink folded back
    into its home since: the grant's units went home with the fold (nothing changed at the
    holder), and the text ends with the add that gives them back at the home, once
    (``CTR.ADD <home> <units> TOKEN <token>``: :meth:`sent_home`). :meth:`redis_ctr.Ctr.refund`
    makes that add."""

    def sent_home(self) -> Optional[Tuple[int, str]]:
        """``(units, token)`` of the add the text names; None in the text of a module from
        before it."""
        words = str(self).rsplit(" ", 3)
        if len(words) != 4 or words[2] != "TOKEN" or not words[3].startswith("ctr-refund:"):
            return None
        try:
            units = int(words[1])
        except ValueError:
            return None
        return (units, words[3]) if units > 0 else None


class FloorRefused(BelowFloor):
    """``add`` of a negative delta that the counter's floor refused (the server replied nil;
    nothing changed; with a token, the refusal is remembered and a retry is refused again).
    Raised by :meth:`redis_ctr.Ctr.add` unless it is called with ``refusable=True``, which
    returns None instead. Not an error text of the module: the library's reading of that nil."""


class NotDurable(RedisError):
    """A durable purchase (``decrfloor(..., replicas=N)``) whose grant fewer than ``N``
    replicas of the granting master acknowledged within ``replicas_timeout_ms``. The grant
    stands on the master (:attr:`value` is its reply, :attr:`key` the holder that granted it)
    but a failover before a replica has it can lose it. Not a module error: the library's
    reading of ``WAIT``'s reply."""

    def __init__(self, key: object, value: int, acknowledged: int, replicas: int) -> None:
        super().__init__(
            f"purchase granted on {key!r} (value {value}) but acknowledged by {acknowledged} "
            f"of the {replicas} replicas asked for in time: a failover may still lose it"
        )
        self.key = key
        self.value = value
        self.acknowledged = acknowledged
        self.replicas = replicas


class TokenTooOld(CtrError):
    """A token's event time is older than the dedup window (``ctr.token-window-ms``): a retry
    of it could no longer be recognised, so the server refuses it."""


class InvalidTime(CtrError):
    """An ``AT`` that is not a unix time in ms (a negative one)."""


class TooFarInFuture(CtrError):
    """An event time (``AT``, with or without a token) is more than ``ctr.token-max-future-ms``
    ahead of the server's clock."""


class LateAdd(CtrError):
    """An add stamped at or before the counter's reconciled watermark: the truth already
    holds it."""


class HistoryMissing(CtrError):
    """``CTR.RECONCILE ... AT`` on a counter that keeps no bucket history yet."""


class TokenReused(CtrError):
    """A token already named another write on this key (another command or amount): a
    client bug that a retry would hide, refused instead."""


class BadWatermark(CtrError):
    """A reconcile watermark the counter cannot use (not a bucket multiple, too old, older than
    the last one, or in the future)."""


class SourceMissing(CtrError):
    """``CTR.RECONCILE ... FROM`` a source key that does not exist, without ``EMPTYOK``: a
    mistyped name would have set the counter to 0; nothing changed."""


class InvalidToken(CtrError):
    """A token outside 1 to 256 bytes."""


class InvalidAmount(CtrError):
    """A ``CTR.DECRFLOOR`` amount that is not positive."""


class InvalidExpire(CtrError):
    """An ``EX``/``PX`` time that ``SET`` would refuse too."""


class InvalidState(CtrError):
    """A ``PNC.MERGE`` blob (or a CTR/PNC state) that does not decode; also what only the
    internal commands meet (``CTR.APPLY``, ``PNC.APPLY``, ``*.SETSTATE``): an effect, replica id
    or replicated operation that no master would produce, or the call itself (the module
    refuses those commands to clients)."""


class TooManyReplicas(CtrError):
    """A merge that would give one PN-counter more than 1024 replica ids."""


class NotPrimary(CtrError):
    """A PN-counter write sent to a replica (only a primary has a replica id of its own), or
    ``CTR.HOLDERS key AT ms`` sent to a replica: a replica may not hold its master's latest grow
    or shrink yet, so its list for a time could differ from the one its master gives later (and
    a retry would walk another list). Ask the home's master."""


class CtrSyntaxError(CtrError):
    """An unknown, repeated or valueless option, an option a form does not take (``FROM SET``
    with ``AT``), or a wrong number of arguments."""


class NotAnInteger(CtrError):
    """An argument that should be a 64-bit integer is not."""


class WrongType(CtrError):
    """The key holds another type (``WRONGTYPE``)."""


class SpreadUnavailable(CtrError):
    """The total of a spread counter could not be gathered: a master serving some holders did
    not answer within ``ctr.gather-timeout-ms``, or (``CLUSTERDOWN``) no master serves a
    holder's slot. Nothing is wrong with the data; retry later."""


class HolderMoving(CtrError, TryAgainError):
    """``TRYAGAIN``: a holder of the spread counter read is being resharded between masters, or
    the home's own slot moved (or failed over) while a clear of its total read the holders.
    Nothing changed. Also a ``TryAgainError``, which cluster clients retry by themselves.

    Also what redis-py's cluster client's own give-up during a slot move becomes:
    ``ClusterError("TTL exhausted.")`` after its retries of ``TRYAGAIN``, ``MOVED`` and ``ASK``
    replies (the redis-py error is its ``__cause__``)."""


class BudgetInFlight(CtrError, TryAgainError):
    """``TRYAGAIN``: a purchase (``CTR.DECRFLOOR``) that only budget still travelling keeps
    from being granted (a holder of a floored spread counter before its share landed, a holder
    whose budget move is unacknowledged), or a ``CTR.ADD`` at a holder of a spread counter with
    a ceiling or a floor whose share of the room is still on its way. Nothing was recorded
    against the token: ask the same holder again with the same token.
    :meth:`redis_ctr.Ctr.decrfloor` and :meth:`redis_ctr.Ctr.add` do, for up to their
    ``purchase_wait``. Also a ``TryAgainError``, which cluster clients retry by themselves
    first."""

    retried = "the purchase"
    """What the caller retries (the text of the error raised when a cluster client gave up)."""


class RefundAwaitsFold(BudgetInFlight):
    """``TRYAGAIN``: ``CTR.REFUND`` at a spread counter's holder that a shrink is folding back
    into its home: the grant's units are on their way home, nothing changed. Retry the refund;
    :meth:`redis_ctr.Ctr.refund` asks again for up to its ``purchase_wait`` (a
    :class:`BudgetInFlight`: the units of the grant are the budget in flight)."""

    retried = "the refund"


class AddAwaitsFold(BudgetInFlight):
    """``TRYAGAIN``: a ``CTR.ADD`` with a token new to a spread counter's holder that a shrink
    is folding back: the holder passes the token on (the folded-back error) only once its fold
    landed, nothing changed. Retry the add with the same token at the same holder;
    :meth:`redis_ctr.Ctr.add` asks again for up to its ``purchase_wait``."""

    retried = "the add"


class HolderError(CtrError):
    """A holder of the spread counter read replied an error (e.g. someone ``SET`` its key):
    its text follows the holder's name."""


class GatherInTransaction(CtrError):
    """A spread counter's total read inside MULTI/EXEC or a script, in a cluster, when other
    masters' values are needed and not cached (``ctr.gather-cache-ms``): read it outside."""


class CannotShrink(CtrError):
    """``CTR.SPREAD`` with fewer holders than the counter has, on a module from before folds."""


class HoldersAhead(CtrError):
    """``CTR.HOLDERS key AT ms`` with ``ms`` ahead of the home master's clock: a grow or a
    shrink may still be dated before it, so the holders in force then are not decided yet.
    :attr:`now` is the home's clock from the text. A purchase through
    :meth:`redis_ctr.Ctr.decrfloor` asks again itself once the home's clock has reached its
    ``at`` (never at another time: a retry must walk the list at that very time), waiting up
    to ``purchase_wait``, so it reaches the caller only past that wait."""

    @property
    def now(self) -> Optional[int]:
        """The home master's clock (unix ms) when it answered; None when the text has none."""
        found = re.search(r"\(now (-?\d+)\)", str(self))
        return None if found is None else int(found.group(1))


class HoldersUnreplicated(CtrError):
    """``TRYAGAIN``: ``CTR.HOLDERS key AT ms`` waited its bound (``ctr.purchase-wait-ms``) for
    the home master's replicas to hold its latest grow or shrink (a failover could lose it, and
    the list at ``ms`` with it), or was sent where it cannot wait (MULTI). Nothing changed: ask
    again. A purchase through :meth:`redis_ctr.Ctr.decrfloor` does, for up to
    ``purchase_wait``."""


class HoldersUnknown(CtrError):
    """``CTR.HOLDERS key AT ms`` of a time the home's record of its holders does not reach: a
    counter spread by an earlier module version (until its next grow or shrink), or a time
    before the oldest entries it had to drop. :meth:`redis_ctr.Ctr.decrfloor` then walks the
    current holders, as before that record existed."""


class HolderAway(ConnectionError):
    """A tokened add that was not sent: its token's holder is on a master that could not be
    reached, or timed out, moments ago (left out for a while). A tokened add never goes to
    another holder (a retry of its token, from this client or another, must reach the holder
    that may count it), so it is refused at once instead of costing a timeout. Nothing was
    sent: retry later with the same token. A redis-py ``ConnectionError``."""

    def __init__(self, holder: object) -> None:
        super().__init__(
            f"not sent: the token's holder {holder!r} is on a master out of reach for now; "
            "retry later with the same token"
        )
        self.holder = holder


class HolderFolded(CtrError):
    """A write to a spread counter holder that a shrink folded back into its home: nothing
    changed (a folded holder answers a retry of a write it did count with that write's reply,
    so this refusal means the write never counted there). Re-read the holders (``CTR.HOLDERS``
    of the home) and write the home or a current holder: :meth:`redis_ctr.Ctr.add` and the
    writers do. Raised to the caller only for a key that is itself a folded holder's name.
    Also a write that would create a key named like a holder that its home does not list
    (``ERR <key> is not a holder of the spread counter <home> ...``: a stale or made-up name),
    or any command on a counter renamed onto a holder's name, which is not that holder
    (``ERR '<key>' was renamed onto the name of a holder ...``): nothing changed, handled the
    same way."""


class UseHomeKey(CtrError):
    """``CTR.SPREAD``, ``CTR.FLOOR`` or ``CTR.CLEAR`` on a key named as a holder of a spread
    counter: those are the whole counter's, sent to its home key (the error names it)."""


class FlooredSpread(CtrError):
    """What floors and spreads do not combine into: ``CTR.FLOOR`` on a spread counter's home
    (set the floor before spreading: the holders keep floors of their own), ``CTR.CLEAR`` of a
    floored spread counter (its holders hold budgets: shrink it to 1 first), and, on modules
    from before budget moves between masters, ``CTR.SPREAD`` of a floored counter."""


class SpreadRefused(CtrError):
    """``CTR.SPREAD`` that cannot be done: a holder count outside 1 to 1024, a key name too long
    to spread, no free slot for a holder on some master, a holder key that already holds a
    counter past its floor or ceiling (below its floor, from modules before ceiled spreads); or
    not now (a budget move or transfer to a holder still
    unacknowledged: retry shortly)."""


class InvalidLimit(CtrError):
    """A rate limiter's configuration or call out of range: ``CTR.THROTTLE``'s ``max_burst``,
    count, period or quantity (negative, zero, past 64 bits), ``CTR.WINDOW``'s window or
    buckets. Nothing changed."""


class LimitRefused(CtrError):
    """``CTR.THROTTLE`` on a counter that holds a value or other state (a limiter needs a key of
    its own), or what a windowed counter does not take (a floor set after its window, a
    reconcile, a spread). Nothing changed."""


class InternalError(CtrError):
    """The module could not finish a command for a reason that is not the caller's: it could
    not store or replicate a write, read the cluster's slot map, or got a reply it did not
    expect from a command it ran inside the server. Report it with the text."""


# (start of the error text, with its code, class), tried in order; "{}" stands for any text.
ERROR_TABLE: tuple[tuple[str, type[CtrError]], ...] = (
    ("ERR counter overflow", CounterOverflow),
    ("ERR value below floor", BelowFloor),
    ("ERR cannot clear to 0: the counter's floor is above 0", BelowFloor),
    ("ERR value above ceiling", AboveCeiling),
    ("ERR the ceiling of a spread counter is set before it spreads", CeilingOnSpread),
    ("ERR CTR.INCREX takes a counter that is not spread", CeilingOnSpread),
    ("ERR cannot clear a ceiled spread counter", CeilingOnSpread),
    ("ERR cannot reconcile a ceiled spread counter", CeilingOnSpread),
    ("ERR refund after a fold", RefundFolded),
    ("ERR token event time is older than the dedup window", TokenTooOld),
    ("ERR token event time is too far in the future", TooFarInFuture),
    ("ERR event time is too far in the future", TooFarInFuture),
    ("ERR AT must be a unix time in ms", InvalidTime),
    ("ERR event time is at or before the counter's reconciled watermark", LateAdd),
    ("ERR counter keeps no bucket history", HistoryMissing),
    ("ERR token already used on this key for another write", TokenReused),
    ("ERR watermark ", BadWatermark),
    ("ERR CTR.RECONCILE at a watermark is not supported", BadWatermark),
    ("ERR no such source key", SourceMissing),
    ("ERR token must be 1 to 256 bytes", InvalidToken),
    ("ERR amount must be positive", InvalidAmount),
    ("ERR invalid expire time", InvalidExpire),
    ("ERR invalid PNC state", InvalidState),
    ("ERR invalid CTR state", InvalidState),
    ("ERR invalid CTR effect", InvalidState),
    ("ERR {} is an internal command", InvalidState),
    ("ERR invalid counter operation", InvalidState),
    ("ERR invalid replica id", InvalidState),
    ("ERR malformed gather request", InvalidState),
    ("ERR PNC.ADD replayed on a PN-counter without a home record", InvalidState),
    ("ERR not enough rights in this deployment", BelowFloor),
    ("ERR PNC.CLEAR of a floored PN-counter", BelowFloor),
    ("ERR cannot give rights to this deployment's own replica id", InvalidState),
    ("ERR {} is replicated as its effect and never replayed", InvalidState),
    ("ERR invalid version", InvalidState),
    ("ERR too many replica ids", TooManyReplicas),
    ("ERR too many floor or transfer entries", TooManyReplicas),
    ("ERR {} must run on a primary", NotPrimary),
    ("ERR CTR.HOLDERS AT is answered by the home's master only", NotPrimary),
    ("ERR syntax error", CtrSyntaxError),
    ("ERR invalid spread id", CtrSyntaxError),
    ("ERR FROM SET takes no AT", CtrSyntaxError),
    ("ERR ENX requires one of EX, PX, EXAT or PXAT", CtrSyntaxError),
    ("ERR LBOUND must not be greater than UBOUND", CtrSyntaxError),
    ("ERR BYFLOAT is not supported", CtrSyntaxError),
    ("ERR wrong number of arguments for ", CtrSyntaxError),
    ("ERR value is not an integer or out of range", NotAnInteger),
    ("WRONGTYPE ", WrongType),
    ("ERR spread counter total unavailable", SpreadUnavailable),
    ("ERR spread counter read lost its result", SpreadUnavailable),
    ("CLUSTERDOWN spread counter holder slot ", SpreadUnavailable),
    ("TRYAGAIN budget in flight", BudgetInFlight),
    ("TRYAGAIN refund awaits a fold", RefundAwaitsFold),
    ("TRYAGAIN add awaits a fold", AddAwaitsFold),
    ("TRYAGAIN spread counter holder", HolderMoving),
    ("TRYAGAIN spread counter '", HolderMoving),
    ("TRYAGAIN spread counter is moving", HolderMoving),
    ("TRYAGAIN units in flight", HolderMoving),
    ("ERR spread counter holder '", HolderError),
    ("ERR spread counter total needs a gather", GatherInTransaction),
    ("ERR a spread counter cannot shrink yet", CannotShrink),
    ("ERR AT is ahead of the home's clock", HoldersAhead),
    ("ERR the holder list at that time is not known", HoldersUnknown),
    ("TRYAGAIN the replicas of the home's master do not hold", HoldersUnreplicated),
    ("ERR this key was a spread counter holder and has been folded back", HolderFolded),
    ("ERR {} is not a holder of the spread counter ", HolderFolded),
    ("ERR '{}' was renamed onto the name of a holder", HolderFolded),
    ("ERR this key was renamed onto the name of a spread counter's holder", HolderFolded),
    ("ERR {} is a holder of the spread counter ", UseHomeKey),
    ("ERR the floor of a spread counter is set before it spreads", FlooredSpread),
    ("ERR cannot clear a floored spread counter", FlooredSpread),
    ("ERR cannot reconcile a floored spread counter", FlooredSpread),
    ("ERR a floored counter cannot be spread yet", FlooredSpread),
    ("ERR holders must be between", SpreadRefused),
    ("ERR key name too long to spread", SpreadRefused),
    ("ERR no free slot found for a holder", SpreadRefused),
    ("ERR no orphaned spread ", SpreadRefused),
    ("ERR a holder key already holds a counter below its floor", SpreadRefused),
    ("ERR a holder key already holds a counter past its floor or ceiling", SpreadRefused),
    ("ERR a budget move to one of the new holders is still in flight", SpreadRefused),
    ("ERR a transfer to that key is still unacknowledged", SpreadRefused),
    ("ERR max_burst and quantity must not be negative", InvalidLimit),
    ("ERR count_per_period and period_seconds must be positive", InvalidLimit),
    ("ERR count_per_period is more than one per nanosecond", InvalidLimit),
    ("ERR window-ms must be", InvalidLimit),
    ("ERR BUCKETS must be 1 to 4096", InvalidLimit),
    ("ERR CTR.THROTTLE needs a key of its own", LimitRefused),
    ("ERR a windowed counter keeps no reconcile history", LimitRefused),
    ("ERR set a windowed counter's floor before its window", LimitRefused),
    ("ERR a windowed counter takes no ceiling", LimitRefused),
    ("ERR could not store the ", InternalError),
    ("ERR could not replicate the write", InternalError),
    ("ERR could not read the cluster slot map", InternalError),
    ("ERR internal error in redis-ctr", InternalError),
    ("ERR unexpected ", InternalError),
)
"""Every module error: the start of its text (with its code; ``{}`` stands for any text) and
its class, tried in order. The one error text of the module that is not here is the text of an
error a command run inside the server (``ZCOUNT``, ``XREVRANGE`` for ``CTR.RECONCILE ... FROM``)
replied, passed on as it is."""

_CODES = ("ERR ", "TRYAGAIN ", "WRONGTYPE ", "CLUSTERDOWN ")
_PATTERNS = tuple(
    (re.compile(".*?".join(re.escape(part) for part in start.split("{}")), re.DOTALL), cls)
    for start, cls in ERROR_TABLE
)


def error_class(message: str) -> type[CtrError] | None:
    """The class for a server error text (with its code, or without the ``ERR`` code that
    redis-py strips), or None when it is not one of the module's errors."""
    text = message if message.startswith(_CODES) else "ERR " + message
    for pattern, cls in _PATTERNS:
        if pattern.match(text):
            return cls
    return None


def cluster_gave_up(error: BaseException) -> bool:
    """redis-py's cluster client's error after its own retries of ``TRYAGAIN``, ``MOVED`` or
    ``ASK`` replies (a slot moving): ``ClusterError("TTL exhausted.")``."""
    return isinstance(error, ClusterError) and "TTL exhausted" in str(error)


def classify_cluster(error: ClusterError) -> BaseException:
    """A redis-py cluster error as the module's class when it means a slot move
    (:class:`HolderMoving`), else ``error`` itself."""
    if cluster_gave_up(error):
        return HolderMoving(
            "spread counter key moving between masters: the cluster client gave up after its "
            f"own retries of TRYAGAIN/MOVED/ASK replies ({error}); retry"
        )
    return error


def classify(error: ResponseError) -> ResponseError:
    """``error`` as the module's exception class when it is one of the module's errors,
    else ``error`` itself."""
    if isinstance(error, CtrError):
        return error
    text = str(error)
    if isinstance(error, TryAgainError):
        # redis-py strips these codes from the text.
        text = "TRYAGAIN " + text
    elif isinstance(error, ClusterDownError):
        text = "CLUSTERDOWN " + text
    cls = error_class(text)
    return cls(*error.args) if cls is not None else error
