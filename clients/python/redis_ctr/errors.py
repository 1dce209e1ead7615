"""The module's errors as exception classes.

Every class derives from :class:`CtrError`, itself a ``redis.exceptions.ResponseError``, so code
that already catches redis-py's ``ResponseError`` keeps working. A server error that is not one
of the module's (or is a newer one this library does not know) stays a plain ``ResponseError``.

The mapping is by the stable start of each error text, as the module replies it (without the
``ERR`` code that redis-py strips).
"""

from __future__ import annotations

from redis.exceptions import ResponseError, TryAgainError


class CtrError(ResponseError):
    """An error replied by the redis-ctr module."""


class CounterOverflow(CtrError):
    """The result would leave the signed 64-bit range; nothing changed."""


class BelowFloor(CtrError):
    """The value would be, or already is, below the counter's floor; nothing changed."""


class TokenTooOld(CtrError):
    """A token's event time is older than the dedup window (``ctr.token-window-ms``): a retry
    of it could no longer be recognised, so the server refuses it."""


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


class InvalidToken(CtrError):
    """A token outside 1 to 256 bytes."""


class InvalidAmount(CtrError):
    """A ``CTR.DECRFLOOR`` amount that is not positive."""


class InvalidExpire(CtrError):
    """An ``EX``/``PX`` time that ``SET`` would refuse too."""


class InvalidState(CtrError):
    """A ``PNC.MERGE`` blob (or a CTR/PNC state) that does not decode."""


class TooManyReplicas(CtrError):
    """A merge that would give one PN-counter more than 1024 replica ids."""


class NotPrimary(CtrError):
    """A PN-counter write sent to a replica (only a primary has a replica id of its own)."""


class CtrSyntaxError(CtrError):
    """An unknown, repeated or valueless option."""


class NotAnInteger(CtrError):
    """An argument that should be a 64-bit integer is not."""


class WrongType(CtrError):
    """The key holds another type (``WRONGTYPE``)."""


class SpreadUnavailable(CtrError):
    """The total of a spread counter could not be gathered: a master serving some holders did
    not answer within ``ctr.gather-timeout-ms``. Nothing is wrong with the data; retry later."""


class HolderMoving(CtrError, TryAgainError):
    """``TRYAGAIN``: a holder of the spread counter read is being resharded between masters.
    Also a ``TryAgainError``, which cluster clients retry by themselves."""


class BudgetInFlight(CtrError, TryAgainError):
    """``TRYAGAIN``: a purchase (``CTR.DECRFLOOR``) that only budget still travelling keeps
    from being granted (a holder of a floored spread counter before its share landed, a holder
    whose budget move is unacknowledged). Nothing was recorded against the token: ask the same
    holder again with the same token. :meth:`redis_ctr.Ctr.decrfloor` does, for up to its
    ``purchase_wait``. Also a ``TryAgainError``, which cluster clients retry by themselves
    first."""


class HolderError(CtrError):
    """A holder of the spread counter read replied an error (e.g. someone ``SET`` its key):
    its text follows the holder's name."""


class GatherInTransaction(CtrError):
    """A spread counter's total read inside MULTI/EXEC or a script, in a cluster, when other
    masters' values are needed and not cached (``ctr.gather-cache-ms``): read it outside."""


class CannotShrink(CtrError):
    """``CTR.SPREAD`` with fewer holders than the counter has, on a module from before folds."""


class HolderFolded(CtrError):
    """A write to a spread counter holder that a shrink folded back into its home: nothing
    changed. Re-read the holders (``CTR.INFO`` of the home) and write the home or a current
    holder (a tokened add that may already have landed must not be sent elsewhere)."""


class FlooredSpread(CtrError):
    """``CTR.SPREAD`` of a floored counter across cluster masters, refused by modules from
    before budget moves between masters (a current module spreads it)."""


class SpreadRefused(CtrError):
    """``CTR.SPREAD`` that cannot be done: a holder count outside 1 to 1024, a key name too long
    to spread, or no free slot for a holder on some master."""


# (start of the error text, class), tried in order. The text is what redis-py leaves after it
# strips a leading "ERR "; WRONGTYPE keeps its code.
_BY_PREFIX: tuple[tuple[str, type[CtrError]], ...] = (
    ("counter overflow", CounterOverflow),
    ("value below floor", BelowFloor),
    ("token event time is older than the dedup window", TokenTooOld),
    ("token event time is too far in the future", TooFarInFuture),
    ("event time is too far in the future", TooFarInFuture),
    ("event time is at or before the counter's reconciled watermark", LateAdd),
    ("counter keeps no bucket history", HistoryMissing),
    ("token already used on this key for another write", TokenReused),
    ("watermark ", BadWatermark),
    ("token must be 1 to 256 bytes", InvalidToken),
    ("amount must be positive", InvalidAmount),
    ("invalid expire time", InvalidExpire),
    ("invalid PNC state", InvalidState),
    ("invalid CTR state", InvalidState),
    ("too many replica ids", TooManyReplicas),
    ("syntax error", CtrSyntaxError),
    ("FROM SET takes no AT", CtrSyntaxError),
    ("spread counter total unavailable", SpreadUnavailable),
    ("spread counter read lost its result", SpreadUnavailable),
    ("TRYAGAIN budget in flight", BudgetInFlight),
    ("TRYAGAIN spread counter holder", HolderMoving),
    ("spread counter holder '", HolderError),
    ("spread counter total needs a gather", GatherInTransaction),
    ("a spread counter cannot shrink yet", CannotShrink),
    ("this key was a spread counter holder and has been folded back", HolderFolded),
    ("a floored counter cannot be spread yet", FlooredSpread),
    ("holders must be between", SpreadRefused),
    ("key name too long to spread", SpreadRefused),
    ("no free slot found for a holder", SpreadRefused),
    ("value is not an integer or out of range", NotAnInteger),
    ("WRONGTYPE", WrongType),
)
# "<COMMAND> must run on a primary: ..." starts with the command's name.
_NOT_PRIMARY = " must run on a primary"


def error_class(message: str) -> type[CtrError] | None:
    """The class for a server error text (with or without its ``ERR`` code), or None when it
    is not one of the module's errors."""
    text = message[4:] if message.startswith("ERR ") else message
    for prefix, cls in _BY_PREFIX:
        if text.startswith(prefix):
            return cls
    if _NOT_PRIMARY in text:
        return NotPrimary
    return None


def classify(error: ResponseError) -> ResponseError:
    """``error`` as the module's exception class when it is one of the module's errors,
    else ``error`` itself."""
    if isinstance(error, CtrError):
        return error
    text = str(error)
    if isinstance(error, TryAgainError):
        # redis-py strips the TRYAGAIN code from the text.
        text = "TRYAGAIN " + text
    cls = error_class(text)
    return cls(*error.args) if cls is not None else error
