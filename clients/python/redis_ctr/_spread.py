"""Spread-aware writes, the part without I/O: which holder an add goes to.

A spread counter's holders (``CTR.HOLDERS``, the home key first: read from the home's master
alone, it never waits for other masters) are cached per key for ``refresh_ms``, one read at a
time per key (concurrent adds on a cold cache wait for that one read); the first write to a key after that re-reads them, so a counter spread
since (by ``CTR.SPREAD`` or an auto-spread) is written over its holders at most ``refresh_ms``
after its first write past the spread. Until then its adds go where they went before (the home
key, or the holders known), which is always right.

- A key found not spread is trusted for ``unspread_refresh_ms`` (30 s by default), and an
  untokened add of a key whose holders were never read goes to that key until the client has
  added to it :data:`PROBE_AFTER` times (:meth:`HolderCache.cold`): a counter that is not
  spread costs one command per add.
- An untokened add goes to a holder picked at random among those not known to be out of reach:
  a holder whose master could not be connected to or timed out, or that this (non-cluster)
  client's server answered ``MOVED`` for, is left out for a while
  (:meth:`HolderCache.unreachable`). Neither ``MOVED`` nor a failed connect means the add
  counted (both come before the command runs), so the add is sent on to another holder.
- A tokened add goes to ``holders[crc16(token) % len(holders)]`` (CRC16/XMODEM of the token's
  bytes, the hash Redis Cluster hashes keys with), the documented token rule, over the whole
  list: the Rust library, and this library in another process, pick the same holder for the
  same token and holder list. A holder that is merely out of reach is never skipped (a retry
  that picked by another list would count twice); while it is left out the add is refused
  unsent (:class:`~redis_ctr.errors.HolderAway`), and a failed connect is raised, not sent
  elsewhere. Only holders this non-cluster client's server does not serve (``MOVED``) are
  skipped: it could never write them. The holder a token was first sent to is remembered (the
  last ``max_tokens`` tokens), so a retry through the same client reaches that holder even when
  the holder list grew in between.
- An add that meets a holder a shrink folded back (``HolderFolded``) did not count there: a
  folded holder answers a retry of a write it counted (same token) with that write's first
  reply, and refuses every other write. So the add re-reads the holders and goes on to a
  current one (a tokened add to its token's holder, remembered from then on), or to the home
  key when that one refused it too (a home is never folded); only the home key's own refusal
  (the key given is a folded holder's name, not a home) is raised. The coalescing writers send
  their sums on the same way.
- An add of a bounded spread counter that one member refuses (the nil of a member whose own
  share of the ceiling's room, or of the floor's budget for a negative add, is used up, while
  another member may still have some) walks on (:class:`AddWalk`): after its first target (the
  random pick, or the token's holder, as above) it visits the other members in the order
  :func:`probe_order` gives for its token (a random seed without one), each once, and returns
  nil only when every member refused. A member records its refusal under the token and replays
  it, so a retry of a tokened add, from any process that knows the same holder list, walks the
  same members in the same order, each replaying its answer (a refusal as nil, an applied add
  with the member's current value): the token counts at most once. The walk costs nothing
  until a nil comes back (an untokened add of a key whose holders were never read reads them
  then, and walks only when the key is a spread counter's home). A member whose room is in
  flight (``TRYAGAIN budget in flight``, :class:`~redis_ctr.errors.BudgetInFlight`), the first
  target or one on the walk, is asked again for a while, as a purchase asks a holder
  (:mod:`redis_ctr._budget`), then raised: it is never skipped nor taken as a refusal. A
  folded member (``HolderFolded``) met on the walk is passed (it did not count the add). A
  tokened walk never skips a member out of reach (refused unsent with
  :class:`~redis_ctr.errors.HolderAway`, or the failed connect raised) and skips one that
  answers ``MOVED`` only at the token's first send; an untokened walk asks members out of
  reach last, passes one it cannot connect to (or that answers ``MOVED``), and then ends with
  that connection error rather than nil, since that member never refused. An add that sets a
  TTL (it goes to the home key alone) and an add through a client made with
  ``spread_refresh_ms=None`` are not walked.
- A purchase (``decrfloor``) follows the documented probe rule: it visits the holders in the
  order :func:`probe_order` derives from its token and stops at the first grant; it may visit
  every holder. Without a token the order comes from a random seed, over the holders adds use.
- A tokened purchase given ``at`` (the order's time, say, stored with the token) walks the
  holders in force at that time, ``CTR.HOLDERS key AT at`` (the home keeps when each holder was
  listed and unlisted), and sends ``AT at`` to every holder it visits. So a retry from any
  process that passes the same token and ``at`` walks the same holders in the same order, each
  replaying its recorded outcome: the token is granted at most once whatever grows and shrinks
  came between (a walk over the current list could, after a grow, start at another holder with
  budget: a second grant). It costs one read of the home's master per purchase: the list is
  read for each purchase, not cached. A time ahead of the home's clock is not decided yet (a
  grow or a shrink may still be dated before it): it is read again once the home's clock has
  reached it, for up to ``purchase_wait`` (:class:`AheadWait`). ``at`` is never replaced by
  another time, since its retries must walk the list at that very time.
- A tokened purchase without ``at`` walks the current holders (those cached for adds) and sends
  no ``AT``. Its retries are safe through the same client only: the list each token first used
  is remembered (the last ``max_tokens`` tokens), so a retry through this client walks it again,
  while a retry from another process walks the current list, which after a grow may start at
  another holder with budget. Give ``at`` to a purchase another process may retry.
- A home spread by an earlier module version keeps no record of its lists until its next grow
  or shrink (``HoldersUnknown``), and a module from before ``AT`` refuses the form: their
  purchases walk the current holders with the caller's ``at``, as before.
- A holder a shrink folded back answers a token it never saw with ``HolderFolded`` (it never
  grants again): the walk passes it as a refusal. A holder that fails stops the walk with the
  error (skipping it would let a retry be decided afresh there); one whose budget is in flight
  is asked again for a while first (:mod:`redis_ctr._budget`).
"""

from __future__ import annotations

import binascii
import random
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._calls import KeyT
from .errors import CtrError, HolderAway, HoldersAhead
Holders = Tuple[KeyT, ...]
PurchaseList = Tuple[Optional[int], Holders]
"""The ``AT`` a tokened purchase sends (the caller's ``at``, None without one) and the holders
it walks: those in force at ``at``, else the current ones."""

UNREACHABLE_MS = 1000
"""How long a holder whose master could not be reached is left out of untokened adds."""
ELSEWHERE_MS = 10_000
"""How long a holder that this client's (non-cluster) server does not serve is left out."""
NODE_AWAY_MS = 5000
"""How long a master that refused a connection is left out (every holder it serves), doubled
while it keeps refusing, up to :data:`NODE_AWAY_MAX_MS`. Its replica taking over is a new
master in the slot map, whose holders are in at once."""
NODE_AWAY_MAX_MS = 30_000
TIMED_OUT_AWAY_MS = 10_000
"""How long a master whose reply timed out (frozen, or overloaded) is left out, doubled while
it keeps timing out, up to :data:`NODE_AWAY_MAX_MS`: longer than a refused connection, since
each probe of it costs the client a whole socket timeout."""
_LOCK_STRIPES = 64
UNSPREAD_REFRESH_MS = 30_000
"""How long a key found not spread is trusted to stay so (a counter spread since, by
``CTR.SPREAD`` elsewhere or an auto-spread, is written over its holders within this time; its
adds go to the home key until then, which is always right)."""
PROBE_AFTER = 8
"""Untokened adds of a key sent straight to it before its holders are first read: a key this
client writes rarely gains nothing from being spread, and a counter that is not spread then
costs one command per add."""


def token_hash(token: KeyT) -> int:
    """CRC16/XMODEM of the token's bytes (str tokens as UTF-8)."""
    data = token.encode() if isinstance(token, str) else token
    return binascii.crc_hqx(data, 0)


def holder_for_token(holders: Sequence[KeyT], token: KeyT) -> KeyT:
    """The documented token rule: ``holders[h(token) mod N]``."""
    return holders[token_hash(token) % len(holders)]


_MASK64 = (1 << 64) - 1


def order_from_seed(seed: int, n: int) -> List[int]:
    """The probe order for ``seed`` (CRC16/XMODEM of the token): holder ``seed % n`` first (the
    token rule's holder), then the others shuffled by Fisher-Yates (positions ``n-1`` down to 2,
    each swapped with ``1 + r % i``), ``r`` the successive outputs of splitmix64 seeded with
    ``seed``. The Rust library computes the same order."""
    order = list(range(n))
    if n == 0:
        return order
    first = seed % n
    order[0], order[first] = order[first], order[0]
    state = seed
    for i in range(n - 1, 1, -1):
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        z ^= z >> 31
        j = 1 + z % i
        order[i], order[j] = order[j], order[i]
    return order


def probe_order(token: KeyT, n: int) -> List[int]:
    """The documented probe rule: the order (indices into the holder list, the home key 0) in
    which a purchase with ``token`` visits ``n`` holders."""
    return order_from_seed(token_hash(token), n)


def holders_of(names: Optional[Sequence[KeyT]], key: KeyT) -> Holders:
    """The holder names of a ``CTR.HOLDERS`` reply; ``(key,)`` for a missing or unspread key."""
    if not names or len(names) < 2 or not _is_text(key):
        # Replies are decoded as UTF-8 text: the holder names of a key that is not could not
        # be spelled back, so its adds stay on the home key (always right).
        return (key,)
    # The home keeps the caller's own spelling (bytes or str); the others are the server's.
    return (key, *names[1:])


#: The pause (seconds) before asking ``CTR.HOLDERS ... AT`` again after
#: :class:`~redis_ctr.errors.HoldersUnreplicated` (the server already waited for its replicas).
UNREPLICATED_PAUSE = 0.01


class AheadWait:
    """What a read of ``CTR.HOLDERS key AT at`` does when the home answers that ``at`` is ahead
    of its clock (:class:`~redis_ctr.errors.HoldersAhead`, which gives that clock): the holders
    then are not decided yet, and a retry elsewhere will walk the list at that very time, so it
    is asked again once the home's clock has reached ``at``, for up to ``limit`` seconds (then
    the error is raised). Never at another time."""

    def __init__(self, at: int, limit: float) -> None:
        self.at = at
        self._deadline = time.monotonic() + limit

    def after(self, error: HoldersAhead) -> float:
        """The pause (seconds) before asking again; raises ``error`` when the wait would pass
        the deadline, or when the text gives no clock behind ``at``."""
        now = error.now
        if now is None or now >= self.at:
            raise error
        return self.within((self.at - now) / 1000, error)

    def within(self, pause: float, error: CtrError) -> float:
        """``pause`` (seconds) when asking again after it stays within the deadline; else
        raises ``error``. Also for :class:`~redis_ctr.errors.HoldersUnreplicated`: the server
        waited for its replicas already, so a short pause."""
        if time.monotonic() + pause > self._deadline:
            raise error
        return pause


class HolderCache:
    """Holder lists per key, each trusted for ``refresh_ms``; at most ``max_keys`` keys and
    ``max_tokens`` remembered tokens (the oldest entries leave first). Thread-safe."""

    def __init__(
        self,
        refresh_ms: int,
        max_keys: int = 10_000,
        max_tokens: int = 10_000,
        node_of: Optional[Callable[[KeyT], Optional[str]]] = None,
        unspread_refresh_ms: int = UNSPREAD_REFRESH_MS,
        probe_after: int = PROBE_AFTER,
    ) -> None:
        if refresh_ms <= 0 or max_keys <= 0 or max_tokens <= 0:
            raise ValueError("refresh_ms, max_keys and max_tokens must be positive")
        self.refresh_ms = refresh_ms
        self.unspread_refresh_ms = max(refresh_ms, unspread_refresh_ms)
        self.probe_after = probe_after
        # Untokened adds sent so far to keys whose holders were never read (see cold()).
        self._cold: Dict[KeyT, int] = {}
        self.node_of = node_of
        """The server (``host:port``) that serves a key, from a cluster client's slot map
        (None without one): a master out of reach leaves out every holder it serves."""
        self._away_nodes: Dict[str, float] = {}
        self._node_strikes: Dict[str, Tuple[int, float]] = {}
        self.max_keys = max_keys
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        # Per key: when its holders expire (monotonic ms), and the holders.
        self._holders: Dict[KeyT, Tuple[float, Holders]] = {}
        self._tokens: Dict[Tuple[KeyT, KeyT], KeyT] = {}
        self._purchases: Dict[Tuple[KeyT, KeyT], PurchaseList] = {}
        self._away: Dict[KeyT, float] = {}
        # Holders this (non-cluster) client's server answered MOVED for, until when: the only
        # ones a tokened add skips (it could never write them).
        self._elsewhere: Dict[KeyT, float] = {}
        # What reachable() last kept from a holder list, until a holder is left out again or
        # an absence may end (it asks the slot map for every holder: a cost on every add).
        self._kept: Dict[Holders, Tuple[int, float, Holders]] = {}
        self._epoch = 0
        # One holder read at a time per key (striped: bounded, nothing to clean up).
        self._refresh_locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]

    def refresh_lock(self, key: KeyT) -> threading.Lock:
        """The lock a sync client holds while it reads the holders of ``key``: threads that
        find the cache stale at once send one ``CTR.HOLDERS``, not one each."""
        return self._refresh_locks[hash(key) % _LOCK_STRIPES]

    def unreachable(
        self,
        holder: KeyT,
        for_ms: float = UNREACHABLE_MS,
        node: Optional[str] = None,
        node_away_ms: float = NODE_AWAY_MS,
        moved: bool = False,
    ) -> None:
        """Leaves ``holder`` out of the holders untokened adds and new sums pick, for
        ``for_ms``: its master could not be connected to, or the client's server does not serve
        it (``MOVED`` to a non-cluster client). With the ``node`` (``host:port``) that could
        not be connected to, every holder that node serves (by :attr:`node_of`) is left out
        too, for :data:`NODE_AWAY_MS`, doubled each time it refuses again (up to
        :data:`NODE_AWAY_MAX_MS`): one failed connect per master now and then, not one per
        holder every second (each costs a cluster client its retries and slot map refreshes,
        about 0.1 s with redis-py 8.1). ``moved``: the server answered ``MOVED`` (it does not
        serve ``holder``), the one case where tokened adds skip it too."""
        now = _now_ms()
        with self._lock:
            self._epoch += 1
            self._away.pop(holder, None)
            _bounded_put(self._away, holder, now + for_ms, self.max_keys)
            if moved:
                self._elsewhere.pop(holder, None)
                _bounded_put(self._elsewhere, holder, now + for_ms, self.max_keys)
            if node is not None and self.node_of is not None:
                strikes, last_until = self._node_strikes.pop(node, (0, 0.0))
                if now - last_until > NODE_AWAY_MAX_MS:
                    strikes = 0  # it was back for a while: a new outage
                away = min(node_away_ms * 2**strikes, NODE_AWAY_MAX_MS)
                self._away_nodes.pop(node, None)
                _bounded_put(self._away_nodes, node, now + away, self.max_keys)
                _bounded_put(self._node_strikes, node, (strikes + 1, now + away), self.max_keys)

    def _node_away(self, holder: KeyT, now: float) -> bool:
        if not self._away_nodes or self.node_of is None:
            return False
        node = self.node_of(holder)
        return node is not None and self._away_nodes.get(node, 0.0) > now

    def timed_out(self, holder: KeyT) -> None:
        """A write to ``holder`` timed out waiting for its reply (a frozen or overloaded master;
        the write may still be applied): every holder its master serves is left out as for a
        failed connect (:meth:`unreachable`), for :data:`TIMED_OUT_AWAY_MS`, so new adds and sums
        go to the others."""
        node = None if self.node_of is None else self.node_of(holder)
        self.unreachable(holder, UNREACHABLE_MS, node, TIMED_OUT_AWAY_MS)

    def away(self, holder: KeyT) -> bool:
        """True while ``holder`` (or the master serving it) is left out."""
        now = _now_ms()
        with self._lock:
            return self._away.get(holder, 0.0) > now or self._node_away(holder, now)

    def reachable(self, holders: Holders) -> Holders:
        """``holders`` without those left out (all of them when that would leave none)."""
        if not self._away and not self._away_nodes:
            return holders
        now = _now_ms()
        with self._lock:
            memo = self._kept.get(holders)
            if memo is not None and memo[0] == self._epoch and now < memo[1]:
                return memo[2]
            kept = tuple(
                h for h in holders if self._away.get(h, 0.0) <= now and not self._node_away(h, now)
            )
            # Valid until the first absence ends (none is added without a new epoch).
            ends = [t for t in (*self._away.values(), *self._away_nodes.values()) if t > now]
            result = kept or holders
            until = min(ends, default=now)
            _bounded_put(self._kept, holders, (self._epoch, until, result), self.max_keys)
        return result

    def fresh(self, key: KeyT) -> Optional[Holders]:
        """The cached holders of ``key`` when read less than ``refresh_ms`` ago
        (``unspread_refresh_ms`` for a key found not spread), else None (then the caller
        reads ``CTR.HOLDERS`` and calls :meth:`learned`)."""
        with self._lock:
            entry = self._holders.get(key)
        if entry is None or _now_ms() >= entry[0]:
            return None
        return entry[1]

    def cold(self, key: KeyT) -> bool:
        """True for an untokened add of a key whose holders were never read, among the first
        ``probe_after - 1`` such adds through this client: it goes to the key given, no
        ``CTR.HOLDERS`` (a home key is always right). A tokened add always routes by the
        holders: its retry from another process must pick the same holder."""
        with self._lock:
            if key in self._holders:
                return False
            seen = self._cold.pop(key, 0) + 1
            if seen >= self.probe_after:
                return False  # now read, and cached from then on
            _bounded_put(self._cold, key, seen, self.max_keys)
            return True

    def learned(
        self, key: KeyT, names: Optional[Sequence[KeyT]], failed: bool = False
    ) -> Holders:
        """Stores what ``CTR.HOLDERS key`` replied. When it ``failed`` (the home's master out of
        reach, a wrong type), the holders known before are kept for another ``refresh_ms``
        (the home key when none): the add itself reports a real error."""
        with self._lock:
            entry = self._holders.pop(key, None)
            self._cold.pop(key, None)
            if failed:
                holders: Holders = (key,) if entry is None else entry[1]
            else:
                holders = holders_of(names, key)
            spread = failed or len(holders) > 1
            until = _now_ms() + (self.refresh_ms if spread else self.unspread_refresh_ms)
            _bounded_put(self._holders, key, (until, holders), self.max_keys)
            return holders

    def forget(self, key: KeyT) -> None:
        """Drops the cached holders of ``key`` (an add met a holder a shrink folded back): the
        next add re-reads them."""
        with self._lock:
            self._holders.pop(key, None)

    def target(self, key: KeyT, holders: Holders, token: Optional[KeyT]) -> KeyT:
        """The key an add goes to: a random holder (among those in reach), or the token's
        holder (the one it was first sent to, when remembered; else by the token rule over
        :meth:`writable` holders). Raises :class:`~redis_ctr.errors.HolderAway`, sending
        nothing, when the token's holder is left out for now."""
        if token is None:
            if len(holders) == 1:
                return holders[0]
            return random.choice(self.reachable(holders))
        with self._lock:
            chosen = self._tokens.get((key, token))
        if chosen is None:
            chosen = holder_for_token(self.writable(holders), token)
        if len(holders) > 1 and self.away(chosen):
            raise HolderAway(chosen)
        with self._lock:
            # Remembered even for an unspread key: a retry after the key spreads must still
            # reach the home key its first send went to.
            if (key, token) not in self._tokens:
                _bounded_put(self._tokens, (key, token), chosen, self.max_tokens)
        return chosen

    def writable(self, holders: Holders) -> Holders:
        """``holders`` without those this client's server answered ``MOVED`` for (all of them
        when that would leave none): the list the token rule picks from. A holder out of reach
        stays in it."""
        if not self._elsewhere:
            return holders
        now = _now_ms()
        with self._lock:
            kept = tuple(h for h in holders if self._elsewhere.get(h, 0.0) <= now)
        return kept or holders

    def remembers(self, key: KeyT, token: Optional[KeyT]) -> bool:
        """True when ``token`` was sent for ``key`` before (its holder is remembered): a retry,
        which must reach that holder whatever happens there."""
        if token is None:
            return False
        with self._lock:
            return (key, token) in self._tokens

    def retarget(
        self, key: KeyT, holders: Holders, token: Optional[KeyT], folded: Sequence[KeyT]
    ) -> KeyT:
        """The key an add goes to after the ``folded`` holders refused it as folded back into
        their home (so it did not count there): a random one of ``holders`` (re-read) that
        did not refuse it, or the token's holder (by the token rule over :meth:`writable`
        holders), remembered from now on; the home key when that one refused it too (a home is
        never folded). Also after holders that did not run it at all (an untokened add after a
        failed connect or ``MOVED``, a tokened one after ``MOVED``): then ``folded`` lists
        those."""
        if token is None:
            current = [h for h in self.reachable(holders) if h not in folded]
            return random.choice(current) if current else key
        chosen = holder_for_token(self.writable(holders), token)
        if chosen in folded:
            chosen = key
        with self._lock:
            self._tokens.pop((key, token), None)
            _bounded_put(self._tokens, (key, token), chosen, self.max_tokens)
        return chosen

    def remembered_purchase(
        self, key: KeyT, token: Optional[KeyT], at: Optional[int]
    ) -> Optional[PurchaseList]:
        """The ``AT`` and holder list purchase ``token`` first used, when remembered and ``at``
        fits them (:func:`_fits`)."""
        if token is None:
            return None
        with self._lock:
            known = self._purchases.get((key, token))
        return known if known is not None and _fits(known, at) else None

    def probe_targets(
        self, key: KeyT, listed: PurchaseList, token: Optional[KeyT], at: Optional[int]
    ) -> PurchaseList:
        """The ``AT`` a purchase sends and the holders it visits, in order: by the probe rule
        over the list remembered for ``token`` when it fits ``at`` (so one thread's first send
        wins over another's of the same token), else over ``listed``, remembered from now on;
        without a token, ``listed`` in the order of a random seed."""
        if token is None:
            x, holders = listed
            seed = random.getrandbits(16)
            return x, tuple(holders[i] for i in order_from_seed(seed, len(holders)))
        with self._lock:
            first = self._purchases.get((key, token))
            if first is None or not _fits(first, at):
                first = listed
                self._purchases.pop((key, token), None)
                _bounded_put(self._purchases, (key, token), first, self.max_tokens)
        x, holders = first
        return x, tuple(holders[i] for i in probe_order(token, len(holders)))


class AddWalk:
    """The members an add of a spread counter goes on to after a member refused it (a nil
    reply): ``holders`` in the order of the probe rule for ``token`` (:func:`probe_order`; a
    random seed without a token), each at most once, those in ``visited`` (its first target,
    and any it was sent on from) skipped. No I/O: the clients send, and ask :meth:`next` after
    each refusal."""

    def __init__(
        self,
        cache: HolderCache,
        holders: Holders,
        token: Optional[KeyT],
        visited: Sequence[KeyT],
        retry: bool,
    ) -> None:
        seed = random.getrandbits(16) if token is None else token_hash(token)
        self._order = [holders[i] for i in order_from_seed(seed, len(holders))]
        self._holders = holders
        self._visited: List[KeyT] = list(visited)
        self._cache = cache
        self._tokened = token is not None
        self._retry = retry
        self._unreached: Optional[BaseException] = None

    def unreached(self, error: BaseException) -> None:
        """The member just sent to did not run the add (a failed connect, ``MOVED``) and is
        passed: the walk then ends with ``error`` raised rather than nil, since that member
        never refused."""
        self._unreached = error

    def next(self) -> Optional[KeyT]:
        """The next member to send the add to; None when every member refused it. Raises the
        error of a member passed unreached (:meth:`unreached`) instead of None; for a tokened
        add, :class:`~redis_ctr.errors.HolderAway` (nothing sent) when the next member is left
        out for now (it is never skipped: a retry would be decided afresh there)."""
        left = [h for h in self._order if h not in self._visited]
        if self._tokened and not self._retry:
            # Holders this non-cluster client's server answered MOVED for: it could never
            # write them (as the token rule's writable list).
            writable = self._cache.writable(self._holders)
            left = [h for h in left if h in writable]
        if not left:
            if self._unreached is not None:
                raise self._unreached
            return None
        if self._tokened:
            chosen = left[0]
            if self._cache.away(chosen):
                raise HolderAway(chosen)
        else:
            # Members out of reach are asked last (none is skipped before it was asked).
            chosen = next((h for h in left if not self._cache.away(h)), left[0])
        self._visited.append(chosen)
        return chosen


def _fits(known: PurchaseList, at: Optional[int]) -> bool:
    """True when a purchase given ``at`` walks the list remembered for its token, ``known``: it
    gives no time of its own (a retry through this client of whatever the token first sent), or
    the one ``known`` was sent with. Another ``at`` is another purchase time: its own list."""
    return at is None or known[0] == at


def _is_text(key: KeyT) -> bool:
    if isinstance(key, str):
        return True
    try:
        key.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _now_ms() -> float:
    return time.monotonic() * 1000


def _bounded_put(entries: Dict[Any, Any], key: Any, value: Any, cap: int) -> None:
    while len(entries) >= cap:
        del entries[next(iter(entries))]
    entries[key] = value

