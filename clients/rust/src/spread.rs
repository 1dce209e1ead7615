//! Spread-aware writes: [`SpreadRouter`] sends an add of a spread counter to one of its
//! holders, learned from `CTR.HOLDERS` (the home key first; read from the home's master alone,
//! it never waits for other masters, so a master down or frozen does not slow it).
//!
//! - The holders of a key are trusted for [`SpreadRouter::refresh`] (default 1 s); the first
//!   write after that reads `CTR.HOLDERS` again, so a counter spread since (by `CTR.SPREAD` or
//!   an auto-spread) is written over its holders at most that long after its first write past
//!   the spread. Until then its adds go where they went before (the home key, or the holders
//!   known), which is always right. A `CTR.HOLDERS` that fails (the home's master out of reach,
//!   a wrong type) keeps the holders known for another period (the home key when none): the add
//!   itself reports a real error. One read at a time per key: threads (or async tasks) that
//!   find the cache stale together wait for the one `CTR.HOLDERS` in flight.
//! - An untokened add goes to a holder picked at random among those not left out (below); a
//!   tokened add to `holders[crc16(token) % holders.len()]` (CRC16/XMODEM of the token's
//!   bytes, the hash Redis Cluster hashes keys with) over the whole list: the documented token
//!   rule, the same holder the Python library, or this one in another process, picks. A holder
//!   merely out of reach is never skipped (a retry that picked by another list would count
//!   twice): while it is left out the add is refused unsent ([`CtrError::HolderAway`]). Only
//!   holders this non-cluster connection's server answered `MOVED` for are skipped: it could
//!   never write them. The holder a token was first sent to is remembered (the last
//!   [`SpreadRouter::MAX_TOKENS`]), so a retry through the same router reaches it even when the
//!   holder list grew in between.
//! - An add that did not run on a holder goes on to another one: `MOVED` (a non-cluster
//!   connection, e.g. a `redis::Connection` to the home's master, whose server does not serve
//!   that holder) or a refused connection (the holder's master is down) both come before the
//!   command runs. The holder is left out of new adds for [`SpreadRouter::UNREACHABLE`] (a
//!   refused connection) or [`SpreadRouter::ELSEWHERE`] (`MOVED`). This applies to untokened
//!   adds; a tokened one goes on only at its first send after `MOVED`. A refused connection
//!   is returned for a tokened add, and a tokened add this router sent before (a retry) stays
//!   with its holder, whatever it answers.
//! - An add whose reply timed out (a frozen or overloaded master; the write may still count,
//!   since the master runs what it had read once it wakes) is never sent elsewhere: its error
//!   is returned (maybe counted, as a lost reply; a tokened add retried with its token reaches
//!   the same holder and counts once). Every holder that master serves (by the cluster's slot
//!   map, `CLUSTER SLOTS`, read from the home key's master when a spread counter's holders are
//!   first read and again every [`SpreadRouter::SLOTS_REFRESH`] while no master is left out) is
//!   left out of new adds for [`SpreadRouter::TIMED_OUT_AWAY`], doubled while it keeps timing
//!   out, up to [`SpreadRouter::NODE_AWAY_MAX`]: each probe of it costs a whole response
//!   timeout. On a `redis::cluster::ClusterConnection` a holder write is sent as a one-command
//!   cluster pipeline, which the `redis` crate sends once: its plain requests resend a command
//!   whose reply timed out (`ClusterClientBuilder::retries` times, default 16, each waiting the
//!   response timeout, each a copy the frozen master may count). A connection that broke once
//!   the write was sent (the master may have run it, its reply lost) is no reason to send it
//!   again either: its error is returned, maybe counted, unless a copy cannot count twice (a
//!   tokened write replays its first reply; a floor, a ceiling, a reconcile set what they set).
//!   After a failure that proves it did not run (`MOVED`, `ASK`, `TRYAGAIN`, a refused
//!   connection) it is sent as a plain request, as the crate sends every other one. The async
//!   connections of the `redis` crate have no such path: see [`SpreadRouter::add_async`].
//! - An add that meets a holder a shrink folded back (`HolderFolded`) did not count there: a
//!   folded holder answers a retry of a write it counted (same token) with that write's first
//!   reply and refuses any other. So the add re-reads the holders and goes on to a current one
//!   (a tokened add to its token's holder, remembered from then on), or to the home key when
//!   that one refused it too (a home is never folded); only the home key's own refusal (the
//!   key given is a folded holder's name) is returned. A holder still folding passes a new
//!   token on only once its fold has landed: past the server's wait it answers
//!   [`ModuleError::AddAwaitsFold`], and the add asks it again, with the same token, for up to
//!   [`SpreadRouter::purchase_wait`] (as a purchase asks below).
//! - An add a member refuses (a nil reply: a ceiled spread's positive add at a member whose
//!   share of the ceiling's room is full, or a floored spread's negative add at a member whose
//!   share of the floor's room is used up), although the counter may still have room at
//!   another member, walks on to the other members, and is None only when every member
//!   refused it. Its first target is the one above (the random pick; the token's holder); then
//!   the members in the order the probe rule of purchases gives ([`probe_order`] of its token;
//!   without a token, [`order_from_seed`] of a random seed), skipping those it already
//!   visited. So a retry of a tokened add from any process (the Python library walks by the
//!   same rule: its first target, then `probe_order(token)` without it) walks the same members
//!   in the same order, each replaying what it recorded under the token (its refusal, or the
//!   add it counted): the token counts at most once. The list a token's walk went over is
//!   remembered (the last [`SpreadRouter::MAX_TOKENS`]), so a retry through the same router
//!   walks it again after a grow; a retry from another process walks the current list, as a
//!   tokened purchase without `at` does. A member that answers
//!   [`ModuleError::BudgetInFlight`] (its share of the room still on its way; the server
//!   normally holds the add until it lands and answers this only past its wait) is asked
//!   again, with the same token, as a purchase's walk asks it (below), then the error is
//!   returned: it is never skipped, nor taken for a refusal. A holder folded back
//!   (`HolderFolded`: it did not count there) is passed, as a purchase's walk passes it. Any
//!   other error stops a tokened walk (a timeout, a master down: a retry would find that
//!   member with room and count the token twice), and a member left out stops it unsent
//!   ([`CtrError::HolderAway`]), as for its first target; an untokened walk goes on past a
//!   member that did not run it (`MOVED`, a refused connection: left out as above) or that is
//!   left out, and returns that error (not None) when every other member refused. A timeout is
//!   returned in both. An add that is not refused, or a counter that is not spread, costs what
//!   it cost before: one command, no walk. `ctr_add` of [`CtrCommands`](crate::CtrCommands),
//!   and the adds of a pipeline, write the key given and never walk; adds that change a TTL
//!   (next) go to the home key and do not walk either.
//! - An add that sets or removes a TTL (`EX`/`PX`/`EXAT`/`PXAT`, `ENX`, `PERSIST`) goes to the
//!   home key: a TTL set on a holder would expire that holder alone.
//! - Reads (`ctr_get`, `ctr_mget`, `ctr_info` of the home key) already reply the total.
//! - A purchase ([`SpreadRouter::decrfloor`]) follows the documented probe rule: it visits the
//!   holders in the order [`probe_order`] derives from its token, stopping at the first grant.
//! - A tokened purchase given `at` (the order's time, say, stored with the token) walks the
//!   holders in force at that time, `CTR.HOLDERS key AT at` (the home keeps when each holder
//!   was listed and unlisted, for the token window), and sends `AT at` to each holder it
//!   visits. So a retry from any process that passes the same token and `at` walks the same
//!   holders in the same order, each replaying its recorded outcome: the token is granted at
//!   most once whatever grows and shrinks came between (a walk over the current list after a
//!   grow could start at another holder with budget and grant the token again). It costs one
//!   read of the home's master per purchase. A time ahead of the home's clock is not decided
//!   yet (a grow or a shrink may still be dated before it): the read is made again once the
//!   home's clock has reached it, for up to [`SpreadRouter::purchase_wait`], then the purchase
//!   returns [`ModuleError::HoldersAhead`], nothing sent. `at` is never replaced by another
//!   time, since its retries must walk the list at that very time.
//! - A tokened purchase without `at` walks the current holders (the ones cached for adds) and
//!   sends no `AT`. Its retries are safe through the same router only: the list each token
//!   first used is remembered (the last [`SpreadRouter::MAX_TOKENS`]), so a retry through this
//!   router walks it again, while a retry from another process walks the current list, which
//!   after a grow may start at another holder with budget (a second grant). Give `at` to a
//!   purchase another process may retry.
//! - A home spread by an earlier module version does not know its list at a time
//!   ([`ModuleError::HoldersUnknown`], until its next grow or shrink), and a module from before
//!   `CTR.HOLDERS key AT` refuses it (its arity error): their purchases walk the current list
//!   with the caller's `at`, as before. Untokened purchases walk the current holders in a
//!   random order.
//! - In a walk, a holder a shrink folded back ([`ModuleError::HolderFolded`]) is a refusal: it
//!   replays a token it recorded and never grants another. A holder that fails otherwise (a
//!   master down) stops the walk with the error: skipping it would let a retry be decided
//!   afresh there. A holder that answers [`ModuleError::BudgetInFlight`] (its share, or a move,
//!   still travelling; nothing recorded) is asked again, with the same token, after 5 ms,
//!   10 ms, ... up to 100 ms apart, for up to [`SpreadRouter::purchase_wait`] (default
//!   [`SpreadRouter::DEFAULT_PURCHASE_WAIT`]); then the walk stops with that error, never
//!   skipping the holder.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{ConnectionLike, Value};

use crate::calls;
use crate::commands::run;
use crate::error::{CtrError, ModuleError};
use crate::types::AddOptions;

/// A counter's holders, the home key first (just the home key when it is not spread).
pub type Holders = Arc<[Vec<u8>]>;

/// The holders a tokened purchase walks, and the `AT` it sends to each of them (the caller's
/// `at`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct PurchaseList {
    at: Option<i64>,
    holders: Holders,
}

/// CRC16/XMODEM, the checksum Redis Cluster hashes keys with.
pub fn token_hash(token: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in token {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The documented token rule: `holders[h(token) mod N]`.
pub fn holder_for_token<'a>(holders: &'a [Vec<u8>], token: &[u8]) -> &'a [u8] {
    &holders[usize::from(token_hash(token)) % holders.len()]
}

/// The cluster slot of `key` (CRC16 of its `{hash tag}` or whole name, mod 16384).
fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    token_hash(tagged.unwrap_or(key)) % 16384
}

/// Slot ranges (first and last slot) and the master (`host:port`) serving each.
type SlotRanges = Vec<(u16, u16, String)>;

/// The slot ranges of a `CLUSTER SLOTS` reply, each with its master (`host:port`); empty for
/// any other reply (a server outside a cluster answers an error).
fn slot_ranges(reply: &Value) -> SlotRanges {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    let number = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(fields) = range else {
                return None;
            };
            let Some(Value::Array(master)) = fields.get(2) else {
                return None;
            };
            let (host, port) = (text(master.first()?)?, text(master.get(1)?)?);
            Some((
                number(fields.first()?)?,
                number(fields.get(1)?)?,
                format!("{host}:{port}"),
            ))
        })
        .collect()
}

/// The documented probe rule: the order in which a purchase with token `token` visits `n`
/// holders (indices into the holder list, the home key 0). See [`order_from_seed`].
pub fn probe_order(token: &[u8], n: usize) -> Vec<usize> {
    order_from_seed(token_hash(token), n)
}

/// The probe order for `seed` (CRC16/XMODEM of the token): the token rule's holder
/// `seed mod n` first, so that a purchase starts where a tokened add of the same token goes;
/// then the other holders shuffled by Fisher-Yates (positions `n-1` down to 2, each swapped
/// with position `1 + r mod i`), `r` the successive outputs of splitmix64 seeded with `seed`.
/// The Python library computes the same order.
pub fn order_from_seed(seed: u16, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if n == 0 {
        return order;
    }
    order.swap(0, usize::from(seed) % n);
    let mut state = u64::from(seed);
    for i in (2..n).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        order.swap(i, 1 + (z % i as u64) as usize);
    }
    order
}

/// Entries in insertion order; the oldest leave first once `cap` are held.
struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    fn new(cap: usize) -> Bounded<K, V> {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_some() {
            return;
        }
        self.order.push_back(key);
        while self.order.len() > self.cap {
            if let Some(oldest) = self.order.pop_front() {
                self.map.remove(&oldest);
            }
        }
    }

    /// Forgets `key` (rare: a linear pass over the order).
    fn remove(&mut self, key: &K) {
        if self.map.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

struct Cache {
    holders: Bounded<Vec<u8>, (Instant, Holders)>,
    /// Holders left out of new adds until the time given (see [`SpreadRouter::UNREACHABLE`]).
    away: Bounded<Vec<u8>, Instant>,
    /// Holders this (non-cluster) connection's server answered `MOVED` for, until the time
    /// given: the only ones a tokened add skips (it could never write them).
    elsewhere: Bounded<Vec<u8>, Instant>,
    tokens: Bounded<(Vec<u8>, Vec<u8>), Vec<u8>>,
    /// The list and time each purchase token first used, by (key, token).
    purchases: Bounded<(Vec<u8>, Vec<u8>), PurchaseList>,
    /// The list each tokened add walked after a refusal, by (key, token).
    walks: Bounded<(Vec<u8>, Vec<u8>), Holders>,
    picks: u64,
    /// Masters (`host:port`) left out of new adds until the time given, and how often each
    /// timed out in a row (with the end of its last absence).
    away_nodes: Bounded<String, Instant>,
    strikes: Bounded<String, (u32, Instant)>,
    /// The cluster's slot ranges and their masters, and when they were read.
    slots: Option<(Instant, SlotRanges)>,
}

impl Cache {
    /// The master serving `key` by the slot map read last (None without one).
    fn node_of(&self, key: &[u8]) -> Option<&str> {
        let slot = key_slot(key);
        let (_, ranges) = self.slots.as_ref()?;
        ranges
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| node.as_str())
    }

    /// True while `holder`, or the master serving it, is left out.
    fn away(&self, holder: &[u8], now: Instant) -> bool {
        let left_out = |until: Option<&Instant>| until.is_some_and(|until| *until > now);
        left_out(self.away.map.get(holder))
            || (!self.away_nodes.map.is_empty()
                && self
                    .node_of(holder)
                    .is_some_and(|node| left_out(self.away_nodes.map.get(node))))
    }
}

/// Routes the adds of spread counters to their holders (see the [module](self) docs). One
/// router is shared by every thread of a process (it locks briefly, never across I/O).
pub struct SpreadRouter {
    refresh: Duration,
    purchase_wait: Duration,
    /// Replicas that must acknowledge a grant before `decrfloor` returns it, and how long
    /// `WAIT` waits for them (see [`SpreadRouter::with_durable_purchases`]).
    durable: Option<(u32, Duration)>,
    cache: Mutex<Cache>,
    random: std::collections::hash_map::RandomState,
    /// Held while a key's holders are read (striped by key: bounded, nothing to clean up).
    refreshing: Vec<Mutex<()>>,
    #[cfg(feature = "aio")]
    refreshing_async: Vec<tokio::sync::Mutex<()>>,
}

/// Stripes of the single-flight refresh locks.
const REFRESH_STRIPES: usize = 64;

impl Default for SpreadRouter {
    fn default() -> SpreadRouter {
        SpreadRouter::new(SpreadRouter::DEFAULT_REFRESH)
    }
}

impl SpreadRouter {
    /// How long a key's holders are trusted by default.
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(1);
    /// Keys whose holders are cached, at most.
    pub const MAX_KEYS: usize = 10_000;
    /// Tokens whose holder is remembered, at most.
    pub const MAX_TOKENS: usize = 10_000;
    /// How long a purchase asks a holder again while it answers that budget is in flight.
    pub const DEFAULT_PURCHASE_WAIT: Duration = Duration::from_secs(2);
    /// How long a holder whose master refused a connection is left out of new adds.
    pub const UNREACHABLE: Duration = Duration::from_secs(1);
    /// How long a holder that the connection's server answered `MOVED` for (a non-cluster
    /// connection) is left out of new adds.
    pub const ELSEWHERE: Duration = Duration::from_secs(10);
    /// How long a master whose reply timed out (frozen, overloaded) is left out of new adds
    /// (every holder it serves), doubled while it keeps timing out.
    pub const TIMED_OUT_AWAY: Duration = Duration::from_secs(10);
    /// The longest a master is left out at a time.
    pub const NODE_AWAY_MAX: Duration = Duration::from_secs(30);
    /// How long the cluster's slot map (which master serves each holder) is trusted.
    pub const SLOTS_REFRESH: Duration = Duration::from_secs(30);

    /// A router that trusts a key's holders for `refresh`.
    pub fn new(refresh: Duration) -> SpreadRouter {
        SpreadRouter {
            refresh,
            purchase_wait: SpreadRouter::DEFAULT_PURCHASE_WAIT,
            durable: None,
            cache: Mutex::new(Cache {
                holders: Bounded::new(SpreadRouter::MAX_KEYS),
                away: Bounded::new(SpreadRouter::MAX_KEYS),
                elsewhere: Bounded::new(SpreadRouter::MAX_KEYS),
                tokens: Bounded::new(SpreadRouter::MAX_TOKENS),
                purchases: Bounded::new(SpreadRouter::MAX_TOKENS),
                walks: Bounded::new(SpreadRouter::MAX_TOKENS),
                picks: 0,
                away_nodes: Bounded::new(SpreadRouter::MAX_KEYS),
                strikes: Bounded::new(SpreadRouter::MAX_KEYS),
                slots: None,
            }),
            random: Default::default(),
            refreshing: (0..REFRESH_STRIPES).map(|_| Mutex::new(())).collect(),
            #[cfg(feature = "aio")]
            refreshing_async: (0..REFRESH_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        }
    }

    /// The stripe of the refresh locks `key` takes.
    fn stripe(&self, key: &[u8]) -> usize {
        (self.random.hash_one(key) % REFRESH_STRIPES as u64) as usize
    }

    /// How long a key's holders are trusted.
    pub fn refresh(&self) -> Duration {
        self.refresh
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached holders of `key` when read less than `refresh` ago.
    fn fresh(&self, key: &[u8]) -> Option<Holders> {
        let cache = self.cache();
        let (read, holders) = cache.holders.map.get(key)?;
        (read.elapsed() < self.refresh).then(|| Arc::clone(holders))
    }

    /// Stores what `CTR.HOLDERS key` replied. A holder's name (`UseHomeKey`) is written as it
    /// is; on any other error the holders known before (the home key when none) are kept for
    /// another period: the add itself reports a real error.
    fn learned(&self, key: &[u8], names: Result<Vec<String>, CtrError>) -> Holders {
        let mut cache = self.cache();
        let holders = match names {
            Ok(names) => holders_of(key, Some(names)),
            Err(CtrError::Module(ModuleError::UseHomeKey, _)) => holders_of(key, None),
            Err(_) => match cache.holders.map.get(key) {
                Some((_, known)) => Arc::clone(known),
                None => holders_of(key, None),
            },
        };
        cache.holders.remove(&key.to_vec());
        cache
            .holders
            .insert(key.to_vec(), (Instant::now(), Arc::clone(&holders)));
        holders
    }

    /// Leaves `holder` out of new adds for `time` (see the [module](self) docs); `moved`: its
    /// server answered `MOVED` (it does not serve `holder`), the one case where tokened adds
    /// skip it too.
    pub(crate) fn leave_out(&self, holder: &[u8], time: Duration, moved: bool) {
        let until = Instant::now() + time;
        let mut cache = self.cache();
        cache.away.remove(&holder.to_vec());
        cache.away.insert(holder.to_vec(), until);
        if moved {
            cache.elsewhere.remove(&holder.to_vec());
            cache.elsewhere.insert(holder.to_vec(), until);
        }
    }

    /// A write to `holder` timed out waiting for its reply (see the [module](self) docs):
    /// `holder`, and every holder its master serves, are left out of new adds for a while.
    pub(crate) fn timed_out_at(&self, holder: &[u8]) {
        let now = Instant::now();
        let mut cache = self.cache();
        cache.away.remove(&holder.to_vec());
        cache
            .away
            .insert(holder.to_vec(), now + SpreadRouter::UNREACHABLE);
        let Some(node) = cache.node_of(holder).map(str::to_owned) else {
            return;
        };
        let (strikes, last_until) = cache.strikes.map.get(&node).copied().unwrap_or((0, now));
        // Back for a while since its last absence: a new outage.
        let strikes = match now.checked_duration_since(last_until) {
            Some(back) if back > SpreadRouter::NODE_AWAY_MAX => 0,
            _ => strikes,
        };
        let away = SpreadRouter::TIMED_OUT_AWAY
            .saturating_mul(1 << strikes.min(8))
            .min(SpreadRouter::NODE_AWAY_MAX);
        cache.away_nodes.remove(&node);
        cache.away_nodes.insert(node.clone(), now + away);
        cache.strikes.remove(&node);
        cache.strikes.insert(node, (strikes + 1, now + away));
    }

    /// True while `holder` (or the master serving it) is left out.
    pub(crate) fn away(&self, holder: &[u8]) -> bool {
        self.cache().away(holder, Instant::now())
    }

    /// True when the slot map is to be read (again): never read, or older than
    /// [`SpreadRouter::SLOTS_REFRESH`] while no master is left out (a read then could go to
    /// the master out of reach).
    fn slots_due(&self) -> bool {
        let cache = self.cache();
        match &cache.slots {
            None => true,
            Some((read, _)) => {
                let now = Instant::now();
                read.elapsed() >= SpreadRouter::SLOTS_REFRESH
                    && cache.away_nodes.map.values().all(|until| *until <= now)
            }
        }
    }

    /// Reads the slot map (`CLUSTER SLOTS`) when due, from the master of `key` on a cluster
    /// connection (it just answered `CTR.HOLDERS`); an error keeps none for a period.
    pub(crate) fn learn_slots<C: ConnectionLike + 'static>(&self, con: &mut C, key: &[u8]) {
        if !self.slots_due() {
            return;
        }
        let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
        #[cfg(not(feature = "cluster"))]
        let _ = key;
        let reply = match cluster_of(con) {
            #[cfg(feature = "cluster")]
            Some(cluster) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = Route::new(key_slot(key), SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                cluster.route_command(&cmd, routing)
            }
            _ => cmd.query::<Value>(con),
        };
        self.slots_read(reply.ok().as_ref());
    }

    /// Stores the slot map a `CLUSTER SLOTS` replied (none for an error).
    fn slots_read(&self, reply: Option<&Value>) {
        let ranges = reply.map(slot_ranges).unwrap_or_default();
        self.cache().slots = Some((Instant::now(), ranges));
    }

    /// `holders` without those left out (all of them when that would leave none).
    pub(crate) fn reachable(&self, holders: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let cache = self.cache();
        reachable(&cache, holders)
    }

    /// True when this router sent `token` for `key` before (a retry: it stays with its holder).
    fn remembers(&self, key: &[u8], token: Option<&[u8]>) -> bool {
        token.is_some_and(|t| {
            self.cache()
                .tokens
                .map
                .contains_key(&(key.to_vec(), t.to_vec()))
        })
    }

    /// Drops the cached holders of `key` (a write met one of them folded back): the next
    /// write reads them again.
    pub(crate) fn forget(&self, key: &[u8]) {
        self.cache().holders.remove(&key.to_vec());
    }

    /// Records the holders `CTR.SPREAD` replied.
    pub(crate) fn spread_to(&self, key: &[u8], names: &[String]) {
        let holders = holders_of(key, Some(names.to_vec()));
        self.cache()
            .holders
            .insert(key.to_vec(), (Instant::now(), holders));
    }

    /// A random number, from this router's random state.
    fn pick(&self, cache: &mut Cache) -> u64 {
        cache.picks += 1;
        let mut h = self.random.build_hasher();
        h.write_u64(cache.picks);
        h.finish()
    }

    /// The key an add goes to: a holder picked at random among those not left out, or the
    /// token's holder (the one it was first sent to, when remembered, else by the token rule
    /// over the holders this connection can write). [`CtrError::HolderAway`], nothing sent,
    /// when the token's holder is left out for now.
    fn target(
        &self,
        key: &[u8],
        holders: &[Vec<u8>],
        token: Option<&[u8]>,
    ) -> Result<Vec<u8>, CtrError> {
        let mut cache = self.cache();
        let Some(token) = token else {
            if holders.len() == 1 {
                return Ok(holders[0].clone());
            }
            let holders = reachable(&cache, holders);
            let i = (self.pick(&mut cache) % holders.len() as u64) as usize;
            return Ok(holders[i].clone());
        };
        let remembered = (key.to_vec(), token.to_vec());
        let known = cache.tokens.map.get(&remembered).cloned();
        let target = match known {
            Some(target) => target,
            None => holder_for_token(&writable(&cache, holders), token).to_vec(),
        };
        if holders.len() > 1 && cache.away(&target, Instant::now()) {
            return Err(CtrError::HolderAway { holder: target });
        }
        if !cache.tokens.map.contains_key(&remembered) {
            // Remembered even for an unspread key: a retry after the key spreads must still
            // reach the home key its first send went to.
            cache.tokens.insert(remembered, target.clone());
        }
        Ok(target)
    }

    /// The list and `at` a purchase token first used, when remembered and the caller's `at`
    /// fits it (see [`fits`]).
    fn remembered_purchase(
        &self,
        key: &[u8],
        token: &[u8],
        at: Option<i64>,
    ) -> Option<PurchaseList> {
        let cache = self.cache();
        let known = cache.purchases.map.get(&(key.to_vec(), token.to_vec()))?;
        fits(known, at).then(|| known.clone())
    }

    /// The holders a tokened purchase visits, in the order of the probe rule, and the `AT` it
    /// sends: over the list remembered for the token (when it fits `at`: one thread's first
    /// send wins over another's of the same token), else over `list`, remembered from now on.
    fn probe_targets(
        &self,
        key: &[u8],
        list: PurchaseList,
        token: &[u8],
        at: Option<i64>,
    ) -> (Option<i64>, Vec<Vec<u8>>) {
        let mut cache = self.cache();
        let remembered = (key.to_vec(), token.to_vec());
        let list = match cache.purchases.map.get(&remembered) {
            Some(first) if fits(first, at) => first.clone(),
            _ => {
                cache.purchases.remove(&remembered);
                cache.purchases.insert(remembered, list.clone());
                list
            }
        };
        let order = probe_order(token, list.holders.len())
            .into_iter()
            .map(|i| list.holders[i].clone())
            .collect();
        (list.at, order)
    }

    /// The holders an untokened purchase visits: every one, in the order of a random seed.
    fn random_targets(&self, holders: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let seed = self.pick(&mut self.cache()) as u16;
        order_from_seed(seed, holders.len())
            .into_iter()
            .map(|i| holders[i].clone())
            .collect()
    }

    /// `CTR.DECRFLOOR` of a spread counter by the probe rule (see the [module](self) docs):
    /// what the granting holder can still sell (its value minus its own floor, never below 0;
    /// not the total), or None when every holder visited refused. With a token and `at` (the
    /// order's time, say, stored with the token) it walks the holders in force at `at`, read
    /// with `CTR.HOLDERS key AT at` from the home's master (one read per purchase), and sends
    /// `AT at` to each: a retry from any process given the same token and `at` walks the same
    /// holders in the same order, each replaying what it recorded, so the token is granted at
    /// most once whatever grows and shrinks came between. With a token and no `at` it walks
    /// the current holders and sends no `AT`: its retries are safe through this router only,
    /// which remembers the list of its last [`SpreadRouter::MAX_TOKENS`] tokens. On a counter
    /// that is not spread it is one `CTR.DECRFLOOR` of the key.
    pub fn decrfloor<C: ConnectionLike + 'static>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        amount: i64,
        token: Option<&[u8]>,
        at: Option<i64>,
    ) -> Result<Option<i64>, CtrError> {
        let key = key.as_ref();
        let (sent_at, targets) = match token {
            Some(token) => {
                let list = match self.remembered_purchase(key, token, at) {
                    Some(first) => first,
                    None => self.purchase_list(con, key, at)?,
                };
                self.probe_targets(key, list, token, at)
            }
            None => (at, self.random_targets(&self.holders(con, key)?)),
        };
        for holder in targets {
            let mut wait = BudgetWait::new(self.purchase_wait);
            let bought = loop {
                let bought = send_once(con, purchase_call(&holder, amount, token, sent_at));
                match wait.pause_after(&bought) {
                    Some(pause) => std::thread::sleep(pause),
                    None => break bought,
                }
            };
            if let Some(value) = self.passing_folded(bought, &holder, key, token)? {
                return self.durable_grant(con, &holder, value).map(Some);
            }
        }
        Ok(None)
    }

    /// `CTR.REFUND` of a purchase of a spread counter: walks the holders the purchase `token`
    /// walked (the list this router remembers for the token, else the one in force at `at`:
    /// pass the purchase's `at`; without either, the current holders), in the token's probe
    /// order, until one answers a number: the holder that granted the token gives the units
    /// back there (a retry replays them). None when no holder has a grant of the token in its
    /// window. A holder being folded back since it granted is asked again while the grant's
    /// units travel home ([`ModuleError::RefundAwaitsFold`], for up to the purchase wait); once
    /// they are there it names the add that gives them back at the home, once
    /// ([`ModuleError::RefundFolded`]), which this makes (`key` is the home). On a counter that
    /// is not spread it is one `CTR.REFUND` of the key.
    pub fn refund<C: ConnectionLike + 'static>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        token: &[u8],
        at: Option<i64>,
    ) -> Result<Option<i64>, CtrError> {
        let key = key.as_ref();
        let list = match self.remembered_purchase(key, token, at) {
            Some(first) => first,
            None => self.purchase_list(con, key, at)?,
        };
        for holder in self.probe_targets(key, list, token, at).1 {
            let mut wait = BudgetWait::new(self.purchase_wait);
            let refunded = loop {
                let refunded = send_once(con, calls::refund(&holder, token));
                match wait.pause_after(&refunded) {
                    Some(pause) => std::thread::sleep(pause),
                    None => break refunded,
                }
            };
            let refunded = match sent_home(&refunded) {
                Some((units, home_token)) => {
                    send_once(con, refund_at_home(key, units, home_token))?;
                    Ok(Some(units))
                }
                None => refunded,
            };
            if let Some(units) = refunded? {
                return Ok(Some(units));
            }
        }
        Ok(None)
    }

    /// A holder's answer to a purchase, a holder folded back taken as a refusal: it never
    /// grants again (it replays what it recorded and refuses any other token with that error),
    /// so the walk goes on. An untokened walk met it in a stale holder list: read again next
    /// time. The key given is returned its refusal (a home is never folded: the key is a
    /// folded holder's name).
    fn passing_folded(
        &self,
        bought: Result<Option<i64>, CtrError>,
        holder: &[u8],
        key: &[u8],
        token: Option<&[u8]>,
    ) -> Result<Option<i64>, CtrError> {
        match bought {
            Err(e) if e.module_error() == Some(ModuleError::HolderFolded) && holder != key => {
                if token.is_none() {
                    self.forget(key);
                }
                Ok(None)
            }
            bought => bought,
        }
    }

    /// The list a tokened purchase walks and the `AT` it sends (see the [module](self) docs):
    /// the holders in force at the caller's `at`; the current holders without one, or when the
    /// home does not know its list at that time (still sent with the caller's `at`).
    fn purchase_list<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: &[u8],
        at: Option<i64>,
    ) -> Result<PurchaseList, CtrError> {
        let listed = match at {
            Some(at) => read_listing(con, key, ListingAsk::new(at, self.purchase_wait))?,
            None => None,
        };
        let holders = match listed {
            Some(holders) => holders,
            None => self.holders(con, key)?,
        };
        Ok(PurchaseList { at, holders })
    }

    /// This router with purchases asking a holder again for up to `wait` while it answers
    /// [`ModuleError::BudgetInFlight`] (zero: the error at once).
    pub fn with_purchase_wait(mut self, wait: Duration) -> SpreadRouter {
        self.purchase_wait = wait;
        self
    }

    /// Durable purchases: [`SpreadRouter::decrfloor`] follows a grant with `WAIT replicas
    /// timeout` on the connection that carried it (on a cluster connection: to the master of
    /// the granting key's slot, whose one connection carried it), and returns it only once
    /// `replicas` replicas of that master hold it; else [`CtrError::NotDurable`] (the grant
    /// stands on the master). Costs one round trip plus the replicas' lag per purchase. Not
    /// for the async methods (an async cluster connection routes a keyless `WAIT` to any
    /// node).
    pub fn with_durable_purchases(mut self, replicas: u32, timeout: Duration) -> SpreadRouter {
        self.durable = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// A grant of `holder` checked against [`SpreadRouter::with_durable_purchases`].
    fn durable_grant<C: ConnectionLike + 'static>(
        &self,
        con: &mut C,
        holder: &[u8],
        value: i64,
    ) -> Result<i64, CtrError> {
        let Some((replicas, timeout)) = self.durable else {
            return Ok(value);
        };
        let acknowledged = wait_for_replicas(con, holder, replicas, timeout)?;
        if acknowledged < i64::from(replicas) {
            return Err(CtrError::NotDurable {
                holder: holder.to_vec(),
                value,
                acknowledged,
                replicas,
            });
        }
        Ok(value)
    }

    /// How long a purchase asks a holder again while its budget is in flight.
    pub fn purchase_wait(&self) -> Duration {
        self.purchase_wait
    }

    /// The holders the adds of `key` go to, from the cache or `CTR.HOLDERS` (one read at a
    /// time per key: threads that find the cache stale together wait for the one in flight).
    /// A failed read keeps the holders known before (see the [module](self) docs).
    pub fn holders<C: ConnectionLike>(&self, con: &mut C, key: &[u8]) -> Result<Holders, CtrError> {
        if let Some(holders) = self.fresh(key) {
            return Ok(holders);
        }
        let _one = self.refreshing[self.stripe(key)]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(holders) = self.fresh(key) {
            return Ok(holders); // read by the thread that held the lock
        }
        Ok(self.learned(key, run(con, calls::holders(key))))
    }

    /// `CTR.ADD` routed to a holder: the reply is that holder's value (read the total with
    /// `ctr_get` on the home key). A reply that timed out is returned as its error (the add
    /// may still count; see the [module](self) docs). On a spread counter, an add a member
    /// refuses (nil: its share of the floor's or the ceiling's room is used up) walks on to
    /// the other members, in the probe order of its token (a random one without), and is None
    /// only when every member refused it.
    pub fn add<C: ConnectionLike + 'static>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        delta: i64,
        options: &AddOptions,
    ) -> Result<Option<i64>, CtrError> {
        let key = key.as_ref();
        if options.changes_ttl() {
            return send_once(con, calls::add_with(key, delta, options));
        }
        let holders = self.holders(con, key)?;
        if holders.len() > 1 {
            self.learn_slots(con, key);
        }
        let mut route = self.route_add(key, holders, options.token.as_deref())?;
        loop {
            let added = send_once(
                con,
                calls::add_with(route.target.as_slice(), delta, options),
            );
            match self.after_add(&mut route, added) {
                Step::Done(added) => return added,
                Step::Send => {}
                // A member whose room is on its way, or a folding holder that passes a new
                // token on once its fold landed: asked again.
                Step::Pause(pause) => std::thread::sleep(pause),
                Step::Reread => {
                    self.forget(key);
                    let holders = self.holders(con, key)?;
                    self.reroute(&mut route, holders);
                }
            }
        }
    }

    /// An add of `key` on its way: its first target (see [`SpreadRouter::target`]).
    fn route_add<'a>(
        &self,
        key: &'a [u8],
        holders: Holders,
        token: Option<&'a [u8]>,
    ) -> Result<AddRoute<'a>, CtrError> {
        let retry = self.remembers(key, token);
        let target = self.target(key, &holders, token)?;
        Ok(AddRoute {
            key,
            token,
            retry,
            holders,
            target,
            passed: Vec::new(),
            wait: None,
            walk: None,
            unasked: None,
        })
    }

    /// What an add does after `added`, its target's reply (see the [module](self) docs).
    fn after_add(&self, route: &mut AddRoute<'_>, added: Result<Option<i64>, CtrError>) -> Step {
        if let Some(pause) = self.ask_again(&mut route.wait, &added) {
            return Step::Pause(pause);
        }
        if route.walk.is_some() {
            return self.walked(route, added);
        }
        if matches!(added, Ok(None)) && route.holders.len() > 1 {
            // Refused by this member's share of the room: on to the others.
            self.start_walk(route);
            return self.walk_on(route);
        }
        let (key, token) = (route.key, route.token);
        match self.next_target(&added, &route.target, key, token.is_some(), route.retry) {
            Next::Done => Step::Done(added),
            Next::Elsewhere => {
                let passed = std::mem::take(&mut route.target);
                route.passed.push(passed);
                route.target = self.retarget(key, &route.holders, token, &route.passed);
                route.wait = None;
                Step::Send
            }
            Next::Folded => Step::Reread,
        }
    }

    /// After a holder folded back refused the add (before any member refused it with a nil):
    /// on to a current holder of `holders`, read again.
    fn reroute(&self, route: &mut AddRoute<'_>, holders: Holders) {
        let folded = std::mem::take(&mut route.target);
        route.passed.push(folded);
        route.holders = holders;
        route.target = self.retarget(route.key, &route.holders, route.token, &route.passed);
        route.wait = None;
    }

    /// The members an add walks after its first nil: the probe order of its token over the
    /// list this router remembers for the token (the holders known now, remembered from now
    /// on), or of a random seed without a token; those it already passed left out.
    fn start_walk(&self, route: &mut AddRoute<'_>) {
        let refused = std::mem::take(&mut route.target);
        route.passed.push(refused);
        let order = match route.token {
            Some(token) => {
                let list = self.walk_list(route.key, token, &route.holders);
                probe_order(token, list.len())
                    .into_iter()
                    .map(|i| list[i].clone())
                    .collect()
            }
            None => self.random_targets(&route.holders),
        };
        route.walk = Some(
            order
                .into_iter()
                .filter(|member| !route.passed.contains(member))
                .collect(),
        );
    }

    /// The holder list a tokened add walks: the one remembered for its token, else `holders`,
    /// remembered from now on (a retry through this router walks it again after a grow).
    fn walk_list(&self, key: &[u8], token: &[u8], holders: &Holders) -> Holders {
        let mut cache = self.cache();
        let remembered = (key.to_vec(), token.to_vec());
        if let Some(list) = cache.walks.map.get(&remembered) {
            return Arc::clone(list);
        }
        cache.walks.insert(remembered, Arc::clone(holders));
        Arc::clone(holders)
    }

    /// What a walking add does after `added`, the reply of the member it visited: a value is
    /// returned; a nil, or a holder folded back (it did not count there), goes on to the next
    /// member. A timeout, and any other error, is returned: a member is never skipped (a retry
    /// would find it with room and count the token twice), except by an untokened add, which
    /// goes on past a member that did not run it (`MOVED`, a refused connection: left out for
    /// a while as before), and returns that error instead of None if every other refused.
    fn walked(&self, route: &mut AddRoute<'_>, added: Result<Option<i64>, CtrError>) -> Step {
        let e = match added {
            Ok(Some(_)) => return Step::Done(added),
            Ok(None) => return self.walk_on(route),
            Err(e) => e,
        };
        if timed_out(&e) {
            self.timed_out_at(&route.target);
            return Step::Done(Err(e));
        }
        if e.module_error() == Some(ModuleError::HolderFolded) && route.target != route.key {
            self.forget(route.key); // a stale list: read again by the next add
            return self.walk_on(route);
        }
        let Some(away) = not_run(&e) else {
            return Step::Done(Err(e));
        };
        self.leave_out(&route.target, away, moved(&e));
        if route.token.is_some() {
            return Step::Done(Err(e));
        }
        route.unasked = Some(e);
        self.walk_on(route)
    }

    /// The next member of the walk. None once every member refused; a member left out (its
    /// master out of reach) stops a tokened walk unsent ([`CtrError::HolderAway`]: a retry
    /// must find it) and is passed by an untokened one, which then returns that error instead
    /// of None.
    fn walk_on(&self, route: &mut AddRoute<'_>) -> Step {
        let Some(walk) = route.walk.as_mut() else {
            return Step::Done(Ok(None));
        };
        while let Some(member) = walk.pop_front() {
            if !self.away(&member) {
                let passed = std::mem::replace(&mut route.target, member);
                route.passed.push(passed);
                route.wait = None;
                return Step::Send;
            }
            let left_out = CtrError::HolderAway { holder: member };
            if route.token.is_some() {
                return Step::Done(Err(left_out));
            }
            route.unasked.get_or_insert(left_out);
        }
        Step::Done(route.unasked.take().map_or(Ok(None), Err))
    }

    /// The pause before an add asks its holder again after `added`: a holder folding back
    /// passes a new token on only once its fold has landed ([`ModuleError::AddAwaitsFold`]),
    /// and a member whose share of the room is still on its way answers
    /// [`ModuleError::BudgetInFlight`]; each is asked again for up to the purchase wait, which
    /// starts at its first such answer (again for each member the add goes on to).
    fn ask_again<T>(
        &self,
        wait: &mut Option<BudgetWait>,
        added: &Result<T, CtrError>,
    ) -> Option<Duration> {
        if added.is_ok() {
            return None;
        }
        wait.get_or_insert_with(|| BudgetWait::new(self.purchase_wait))
            .pause_after(added)
    }

    /// What an add does after `added`, its reply from `target`: done (a reply, or an error
    /// that is final or may mean it ran), on to another holder because `target` was folded
    /// back (re-read the holders), or because it did not run there (`MOVED`, a refused
    /// connection: `target` is left out for a while). Never past the home key. A tokened add
    /// goes on only from a holder folded back, or at its first send after `MOVED` (this
    /// connection can never write that holder): a retry of its token, from here or another
    /// process, must reach the holder its rule picks.
    fn next_target<T>(
        &self,
        added: &Result<T, CtrError>,
        target: &[u8],
        key: &[u8],
        tokened: bool,
        retry: bool,
    ) -> Next {
        let Err(e) = added else { return Next::Done };
        if timed_out(e) {
            // Maybe counted there: returned, and that master is left out of new adds.
            self.timed_out_at(target);
            return Next::Done;
        }
        if target == key {
            return Next::Done;
        }
        if e.module_error() == Some(ModuleError::HolderFolded) {
            return Next::Folded;
        }
        let Some(away) = not_run(e) else {
            return Next::Done;
        };
        self.leave_out(target, away, moved(e));
        if !tokened || (moved(e) && !retry) {
            Next::Elsewhere
        } else {
            Next::Done
        }
    }

    /// The key an add goes to after the `skipped` holders refused it as folded back into their
    /// home, or did not run it (`MOVED`, a refused connection), so it did not count there: a
    /// random holder (not left out) of `holders` that did not refuse it, or the token's
    /// holder among those not left out, remembered from now on; the home key when that one
    /// was skipped too (a home is never folded).
    fn retarget(
        &self,
        key: &[u8],
        holders: &[Vec<u8>],
        token: Option<&[u8]>,
        folded: &[Vec<u8>],
    ) -> Vec<u8> {
        let mut cache = self.cache();
        let Some(token) = token else {
            let holders = reachable(&cache, holders);
            let current: Vec<&Vec<u8>> = holders.iter().filter(|h| !folded.contains(h)).collect();
            if current.is_empty() {
                return key.to_vec();
            }
            let i = (self.pick(&mut cache) % current.len() as u64) as usize;
            return current[i].clone();
        };
        let mut chosen = holder_for_token(&writable(&cache, holders), token).to_vec();
        if folded.contains(&chosen) {
            chosen = key.to_vec();
        }
        let remembered = (key.to_vec(), token.to_vec());
        cache.tokens.remove(&remembered);
        cache.tokens.insert(remembered, chosen.clone());
        chosen
    }

    /// `CTR.SPREAD key holders`, and this router's adds of `key` go over them from now on.
    pub fn spread<C: ConnectionLike + 'static>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        holders: u32,
    ) -> Result<Vec<String>, CtrError> {
        let names = send_once(con, calls::spread(key.as_ref(), holders))?;
        self.spread_to(key.as_ref(), &names);
        Ok(names)
    }

    /// The async twin of [`SpreadRouter::holders`].
    #[cfg(feature = "aio")]
    pub async fn holders_async<C: redis::aio::ConnectionLike + Send>(
        &self,
        con: &mut C,
        key: &[u8],
    ) -> Result<Holders, CtrError> {
        if let Some(holders) = self.fresh(key) {
            return Ok(holders);
        }
        let _one = self.refreshing_async[self.stripe(key)].lock().await;
        if let Some(holders) = self.fresh(key) {
            return Ok(holders); // read by the task that held the lock
        }
        let names = crate::commands::run_async(con, calls::holders(key)).await;
        Ok(self.learned(key, names))
    }

    /// The async twin of [`SpreadRouter::decrfloor`].
    #[cfg(feature = "aio")]
    pub async fn decrfloor_async<C: redis::aio::ConnectionLike + Send>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        amount: i64,
        token: Option<&[u8]>,
        at: Option<i64>,
    ) -> Result<Option<i64>, CtrError> {
        let key = key.as_ref();
        let (sent_at, targets) = match token {
            Some(token) => {
                let list = match self.remembered_purchase(key, token, at) {
                    Some(first) => first,
                    None => self.purchase_list_async(con, key, at).await?,
                };
                self.probe_targets(key, list, token, at)
            }
            None => (
                at,
                self.random_targets(&self.holders_async(con, key).await?),
            ),
        };
        for holder in targets {
            let mut wait = BudgetWait::new(self.purchase_wait);
            let bought = loop {
                let call = purchase_call(&holder, amount, token, sent_at);
                let bought = crate::commands::run_async(con, call).await;
                match wait.pause_after(&bought) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => break bought,
                }
            };
            if let Some(value) = self.passing_folded(bought, &holder, key, token)? {
                return Ok(Some(value));
            }
        }
        Ok(None)
    }

    /// The async twin of [`SpreadRouter::refund`].
    #[cfg(feature = "aio")]
    pub async fn refund_async<C: redis::aio::ConnectionLike + Send>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        token: &[u8],
        at: Option<i64>,
    ) -> Result<Option<i64>, CtrError> {
        let key = key.as_ref();
        let list = match self.remembered_purchase(key, token, at) {
            Some(first) => first,
            None => self.purchase_list_async(con, key, at).await?,
        };
        for holder in self.probe_targets(key, list, token, at).1 {
            let mut wait = BudgetWait::new(self.purchase_wait);
            let refunded = loop {
                let refunded = crate::commands::run_async(con, calls::refund(&holder, token)).await;
                match wait.pause_after(&refunded) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => break refunded,
                }
            };
            let refunded = match sent_home(&refunded) {
                Some((units, home_token)) => {
                    let add = refund_at_home(key, units, home_token);
                    crate::commands::run_async(con, add).await?;
                    Ok(Some(units))
                }
                None => refunded,
            };
            if let Some(units) = refunded? {
                return Ok(Some(units));
            }
        }
        Ok(None)
    }

    /// The async twin of [`SpreadRouter::purchase_list`].
    #[cfg(feature = "aio")]
    async fn purchase_list_async<C: redis::aio::ConnectionLike + Send>(
        &self,
        con: &mut C,
        key: &[u8],
        at: Option<i64>,
    ) -> Result<PurchaseList, CtrError> {
        let listed = match at {
            Some(at) => {
                let ask = ListingAsk::new(at, self.purchase_wait);
                read_listing_async(con, key, ask).await?
            }
            None => None,
        };
        let holders = match listed {
            Some(holders) => holders,
            None => self.holders_async(con, key).await?,
        };
        Ok(PurchaseList { at, holders })
    }

    /// The async twin of [`SpreadRouter::add`]. The `redis` crate's async cluster connection
    /// resends a request whose reply timed out (`ClusterClientBuilder::retries` times, each
    /// waiting the response timeout, each a copy a frozen master may count) and offers no way
    /// to send one once: to write holders through it with a master that may freeze, build its
    /// client with `.retries(0)` (it still rebuilds its slot map after `MOVED`, and this router
    /// sends an add that met `MOVED` on to another holder, or returns it for a retry of a
    /// token).
    #[cfg(feature = "aio")]
    pub async fn add_async<C: redis::aio::ConnectionLike + Send>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        delta: i64,
        options: &AddOptions,
    ) -> Result<Option<i64>, CtrError> {
        use crate::commands::run_async;
        let key = key.as_ref();
        if options.changes_ttl() {
            return run_async(con, calls::add_with(key, delta, options)).await;
        }
        let holders = self.holders_async(con, key).await?;
        if holders.len() > 1 && self.slots_due() {
            let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
            self.slots_read(cmd.query_async::<Value>(con).await.ok().as_ref());
        }
        let mut route = self.route_add(key, holders, options.token.as_deref())?;
        loop {
            let call = calls::add_with(route.target.as_slice(), delta, options);
            let added = run_async(con, call).await;
            match self.after_add(&mut route, added) {
                Step::Done(added) => return added,
                Step::Send => {}
                Step::Pause(pause) => tokio::time::sleep(pause).await, // as the blocking add
                Step::Reread => {
                    self.forget(key);
                    let holders = self.holders_async(con, key).await?;
                    self.reroute(&mut route, holders);
                }
            }
        }
    }
}

/// What an add does after a reply (see [`SpreadRouter::next_target`]).
enum Next {
    Done,
    Folded,
    Elsewhere,
}

/// An add on its way over a spread counter's members (see [`SpreadRouter::add`]).
struct AddRoute<'a> {
    key: &'a [u8],
    token: Option<&'a [u8]>,
    /// This router sent the token before (a retry: it stays with its holder).
    retry: bool,
    holders: Holders,
    /// The member the add goes to next.
    target: Vec<u8>,
    /// Members it did not count at: refused it (nil), folded back, or did not run it.
    passed: Vec<Vec<u8>>,
    /// The pauses of asking `target` again (see [`SpreadRouter::ask_again`]).
    wait: Option<BudgetWait>,
    /// The members still to visit once one refused it (None before a nil).
    walk: Option<VecDeque<Vec<u8>>>,
    /// An untokened walk's error for a member it could not ask: returned instead of None.
    unasked: Option<CtrError>,
}

/// What an add does next (see [`SpreadRouter::after_add`]).
enum Step {
    /// The add's reply.
    Done(Result<Option<i64>, CtrError>),
    /// Send it to the route's target.
    Send,
    /// Ask the same target again after this pause.
    Pause(Duration),
    /// Its target was folded back: read the holders again, then on to a current one.
    Reread,
}

/// `holders` without those left out until later than now (all of them when that would leave
/// none).
fn reachable(cache: &Cache, holders: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let now = Instant::now();
    let kept: Vec<Vec<u8>> = holders
        .iter()
        .filter(|h| !cache.away(h, now))
        .cloned()
        .collect();
    if kept.is_empty() {
        holders.to_vec()
    } else {
        kept
    }
}

/// `holders` without those this connection's server answered `MOVED` for (all of them when
/// that would leave none): the list the token rule picks from. A holder out of reach stays in.
fn writable(cache: &Cache, holders: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let now = Instant::now();
    let kept: Vec<Vec<u8>> = holders
        .iter()
        .filter(|h| {
            cache
                .elsewhere
                .map
                .get(*h)
                .is_none_or(|until| *until <= now)
        })
        .cloned()
        .collect();
    if kept.is_empty() {
        holders.to_vec()
    } else {
        kept
    }
}

/// True when `error` is `MOVED`: this (non-cluster) connection's server does not serve the key.
pub(crate) fn moved(error: &CtrError) -> bool {
    matches!(error, CtrError::Redis(e) if e.kind() == redis::ErrorKind::Moved)
}

/// When `error` means that the command never ran, so that an add can go to another holder
/// without counting twice: how long to leave that holder out. `MOVED` (a non-cluster
/// connection's server does not serve the key; a cluster connection follows it itself) or a
/// refused connection (the master is down).
pub(crate) fn not_run(error: &CtrError) -> Option<Duration> {
    match error {
        CtrError::Redis(e) if e.kind() == redis::ErrorKind::Moved => Some(SpreadRouter::ELSEWHERE),
        CtrError::Redis(e) if e.is_connection_refusal() => Some(SpreadRouter::UNREACHABLE),
        _ => None,
    }
}

/// True when `error` is a reply that did not come in time (the connection's read timeout) for
/// a command that was sent: a frozen or overloaded server, which may still run it.
pub(crate) fn timed_out(error: &CtrError) -> bool {
    matches!(error, CtrError::Redis(e) if e.is_timeout())
}

/// A sync cluster connection; without the `cluster` feature there is none (an empty enum), so
/// the crate builds without it (`make simulate` builds the module's tests alone).
#[cfg(feature = "cluster")]
type SyncCluster = redis::cluster::ClusterConnection;
#[cfg(not(feature = "cluster"))]
enum SyncCluster {}

/// `con` as a sync cluster connection, when it is one.
fn cluster_of<C: ConnectionLike + 'static>(con: &mut C) -> Option<&mut SyncCluster> {
    #[cfg(feature = "cluster")]
    return (con as &mut dyn std::any::Any).downcast_mut();
    #[cfg(not(feature = "cluster"))]
    {
        let _ = con;
        None
    }
}

/// Sends one holder write (see the [module](self) docs): on a sync cluster connection as a
/// one-command cluster pipeline, which the `redis` crate does not resend after a timeout or a
/// broken connection; after a failure that proves it did not run (`MOVED`, `ASK`, `TRYAGAIN`,
/// a refused connection), or a broken connection when a copy cannot count twice
/// ([`Call::resendable`](crate::calls::Call): a token, or a write that sets what it sets), as a
/// plain request, which the crate sends as it sends every other one
/// (it reconnects, follows redirections, refreshes its slot map after `MOVED`); one still
/// refused (its master down: the crate keeps its slot map) goes to a node in reach, whose
/// `MOVED` to the slot's current master makes the crate read the map again.
pub(crate) fn send_once<C: ConnectionLike + 'static, T>(
    con: &mut C,
    call: calls::Call<T>,
) -> Result<T, CtrError> {
    #[cfg(feature = "cluster")]
    if let Some(cluster) = cluster_of(con) {
        let sent = redis::cluster::cluster_pipe()
            .add_command(call.cmd.clone())
            .query::<Vec<Value>>(cluster);
        match sent {
            Ok(mut values) => {
                return match (values.pop(), values.is_empty()) {
                    (Some(value), true) => (call.parse)(value),
                    _ => Err(CtrError::Reply(
                        "a one-command pipeline replied otherwise".into(),
                    )),
                };
            }
            // Maybe ran (a frozen master runs what it read when it wakes): not sent again.
            Err(e) if e.is_timeout() => return Err(e.into()),
            Err(e) if never_ran(&e) => {}
            // The connection broke, maybe after the master ran it (its reply lost): sent again
            // only when a copy cannot count twice (a token, or a write that sets what it sets).
            Err(e) if e.is_io_error() && call.resendable => {}
            Err(e) => return Err(e.into()), // the server's reply, or maybe ran
        }
        return match call.cmd.query::<Value>(cluster) {
            Err(e) if e.is_connection_refusal() => {
                // The `redis` crate reconnects to a refused address and never reads the slot
                // map again: after a failover every write of that slot would be refused. A
                // node in reach answers MOVED instead (the command did not run where it was
                // refused), and the crate reads the map again and follows it.
                use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
                let anywhere = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
                (call.parse)(cluster.route_command(&call.cmd, anywhere)?)
            }
            reply => (call.parse)(reply?),
        };
    }
    run(con, call)
}

/// `WAIT replicas timeout` after a write to `key` on `con`: the replicas that acknowledged it.
/// On a sync cluster connection it goes to the master of `key`'s slot, over the one connection
/// the write took.
fn wait_for_replicas<C: ConnectionLike + 'static>(
    con: &mut C,
    key: &[u8],
    replicas: u32,
    timeout: Duration,
) -> Result<i64, CtrError> {
    let mut wait = redis::cmd("WAIT");
    wait.arg(replicas).arg(timeout.as_millis() as u64);
    #[cfg(feature = "cluster")]
    if let Some(cluster) = cluster_of(con) {
        use redis::cluster_routing::{
            get_slot, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
        };
        let master = Route::new(get_slot(key), SlotAddr::Master);
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(master));
        let reply = cluster.route_command(&wait, routing)?;
        return Ok(redis::from_redis_value(&reply)?);
    }
    #[cfg(not(feature = "cluster"))]
    let _ = key;
    Ok(wait.query(con)?)
}

/// True for an error that comes before a command runs (a redirection, a slot being moved or
/// not served, a refused connection).
#[cfg(feature = "cluster")]
fn never_ran(e: &redis::RedisError) -> bool {
    use redis::ErrorKind::{
        Ask, ClusterConnectionNotFound, ClusterDown, MasterDown, Moved, TryAgain,
    };
    matches!(
        e.kind(),
        Moved | Ask | TryAgain | ClusterDown | MasterDown | ClusterConnectionNotFound
    ) || e.is_connection_refusal()
}

/// The pauses of a purchase that asks one holder again while it answers that budget is in
/// flight: 5 ms, doubling up to 100 ms, until `limit` has passed since the first answer.
struct BudgetWait {
    deadline: Instant,
    next: Duration,
}

impl BudgetWait {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_millis(100);

    fn new(limit: Duration) -> BudgetWait {
        BudgetWait {
            deadline: Instant::now() + limit,
            next: BudgetWait::FIRST,
        }
    }

    /// The pause before asking again after `answer`; None when the answer is final (anything
    /// but units in flight: budget to a purchase, a grant's units folding home to a refund, a
    /// fold that a new token's add waits for; or the wait is over).
    fn pause_after<T>(&mut self, answer: &Result<T, CtrError>) -> Option<Duration> {
        let in_flight = matches!(
            answer.as_ref().err().and_then(CtrError::module_error),
            Some(
                ModuleError::BudgetInFlight
                    | ModuleError::RefundAwaitsFold
                    | ModuleError::AddAwaitsFold
            )
        );
        let left = self.deadline.saturating_duration_since(Instant::now());
        if !in_flight || left.is_zero() {
            return None;
        }
        let pause = self.next.min(left);
        self.next = (self.next * 2).min(BudgetWait::MOST);
        Some(pause)
    }
}

/// The add a folded holder's refund names ([`CtrError::refund_sent_home`]), if it is one.
fn sent_home<T>(refunded: &Result<T, CtrError>) -> Option<(i64, String)> {
    refunded.as_ref().err().and_then(CtrError::refund_sent_home)
}

/// The add that gives a folded holder's grant back at the home, under the token the holder
/// named (a retried refund replays it there).
fn refund_at_home(home: &[u8], units: i64, token: String) -> calls::Call<Option<i64>> {
    calls::add_with(home, units, &AddOptions::new().token(token))
}

/// One holder's `CTR.DECRFLOOR` of a purchase.
fn purchase_call(
    holder: &[u8],
    amount: i64,
    token: Option<&[u8]>,
    at: Option<i64>,
) -> calls::Call<Option<i64>> {
    match token {
        Some(token) => calls::decrfloor_with(holder, amount, token, at),
        None => calls::decrfloor(holder, amount),
    }
}

/// True when a purchase given `at` walks the list remembered for its token, `known`: it gives
/// no time of its own, or the one `known` was sent with.
fn fits(known: &PurchaseList, at: Option<i64>) -> bool {
    at.is_none() || known.at == at
}

/// The home master's clock in a [`ModuleError::HoldersAhead`] error (`... (now <ms>) ...`).
fn home_clock(error: &CtrError) -> Option<i64> {
    let CtrError::Module(ModuleError::HoldersAhead, text) = error else {
        return None;
    };
    let after = text.split_once("(now ")?.1;
    after.split_once(')')?.0.trim().parse().ok()
}

/// True when `error` is the arity error of a module from before `CTR.HOLDERS key AT ms`.
fn before_at(error: &CtrError) -> bool {
    let CtrError::Module(ModuleError::Syntax, text) = error else {
        return false;
    };
    text.to_ascii_lowercase()
        .starts_with("err wrong number of arguments for 'ctr.holders'")
}

/// The reads of `CTR.HOLDERS key AT at` for a caller's `at` (see [`read_listing`]).
struct ListingAsk {
    at: i64,
    /// Until when to wait for the home's clock to reach `at`.
    deadline: Instant,
}

/// What a read of `CTR.HOLDERS key AT at` leads to.
enum ListingStep {
    /// The holders in force at `at`; None when the home does not know them (the purchase walks
    /// the current list).
    Done(Result<Option<Holders>, CtrError>),
    /// Ask again after this pause.
    Again(Duration),
}

impl ListingAsk {
    fn new(at: i64, wait: Duration) -> ListingAsk {
        ListingAsk {
            at,
            deadline: Instant::now() + wait,
        }
    }

    /// What to do after `CTR.HOLDERS key AT at` replied `reply`. The home's list at `at` not
    /// known, the key a holder's name, or a module from before `AT` (its arity error): None
    /// (the purchase walks the current list, as before). `at` ahead of the home's clock: a
    /// wait until the clock reaches it, unless that would pass the deadline.
    fn next(&self, key: &[u8], reply: Result<Vec<String>, CtrError>) -> ListingStep {
        let error = match reply {
            Ok(names) => return ListingStep::Done(Ok(Some(holders_of(key, Some(names))))),
            Err(error) => error,
        };
        match error.module_error() {
            Some(ModuleError::HoldersUnknown | ModuleError::UseHomeKey) => {
                return ListingStep::Done(Ok(None))
            }
            Some(ModuleError::HoldersAhead) => {}
            // The server waited for the replicas already: a short pause, then again.
            Some(ModuleError::HoldersUnreplicated) => {
                return self.again_after(Duration::from_millis(10), error)
            }
            _ if before_at(&error) => return ListingStep::Done(Ok(None)),
            _ => return ListingStep::Done(Err(error)),
        }
        let Some(now) = home_clock(&error).filter(|now| *now < self.at) else {
            return ListingStep::Done(Err(error));
        };
        // The list at `at` is not decided before the home's clock reaches it, and a retry must
        // walk that very list: `at` is never replaced by another time.
        self.again_after(Duration::from_millis((self.at - now).max(1) as u64), error)
    }

    /// Ask again after `pause`, unless that passes the deadline (then `error`).
    fn again_after(&self, pause: Duration, error: CtrError) -> ListingStep {
        if Instant::now() + pause > self.deadline {
            return ListingStep::Done(Err(error));
        }
        ListingStep::Again(pause)
    }
}

/// `CTR.HOLDERS key AT at` from the home's master, `at` the caller's time of `ask`: the
/// holders in force then (None when the home does not know them), waiting for up to the
/// deadline of `ask` for the home's clock to reach `at`, else [`ModuleError::HoldersAhead`].
fn read_listing<C: ConnectionLike>(
    con: &mut C,
    key: &[u8],
    ask: ListingAsk,
) -> Result<Option<Holders>, CtrError> {
    loop {
        let reply = run(con, calls::holders_at(key, ask.at));
        match ask.next(key, reply) {
            ListingStep::Done(listed) => return listed,
            ListingStep::Again(pause) => std::thread::sleep(pause),
        }
    }
}

/// The async twin of [`read_listing`].
#[cfg(feature = "aio")]
async fn read_listing_async<C: redis::aio::ConnectionLike + Send>(
    con: &mut C,
    key: &[u8],
    ask: ListingAsk,
) -> Result<Option<Holders>, CtrError> {
    loop {
        let reply = crate::commands::run_async(con, calls::holders_at(key, ask.at)).await;
        match ask.next(key, reply) {
            ListingStep::Done(listed) => return listed,
            ListingStep::Again(pause) => tokio::time::sleep(pause).await,
        }
    }
}

/// The holders named by `CTR.HOLDERS`, the home keeping the caller's spelling; `[key]` when
/// none or just the key.
fn holders_of(key: &[u8], names: Option<Vec<String>>) -> Holders {
    let others = names.unwrap_or_default().into_iter().skip(1);
    std::iter::once(key.to_vec())
        .chain(others.map(String::into_bytes))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hash_is_crc16_xmodem_like_python_binascii_crc_hqx() {
        assert_eq!(token_hash(b"123456789"), 0x31c3);
        assert_eq!(token_hash(b""), 0);
    }

    /// The rule's vectors, shared with the Python library's tests and docs/CLUSTER.md.
    #[test]
    fn probe_orders_follow_the_documented_vectors() {
        assert_eq!(
            probe_order(b"order-1", 16),
            [2, 6, 7, 8, 14, 13, 4, 1, 0, 15, 5, 12, 3, 9, 10, 11]
        );
        assert_eq!(probe_order(b"order-1", 5), [2, 0, 4, 1, 3]);
        assert_eq!(probe_order(b"order-2", 5), [3, 1, 0, 2, 4]);
        assert_eq!(probe_order(b"t", 1), [0]);
        assert!(probe_order(b"t", 0).is_empty());
        for n in 1..40 {
            let token = format!("order-{n}");
            let mut order = probe_order(token.as_bytes(), n);
            assert_eq!(order[0], usize::from(token_hash(token.as_bytes())) % n);
            order.sort_unstable();
            assert_eq!(order, (0..n).collect::<Vec<_>>(), "a permutation");
        }
    }

    #[test]
    fn a_purchase_token_keeps_its_first_holder_list_and_time() {
        let router = SpreadRouter::new(Duration::from_secs(60));
        let three = holders_of(b"k", Some(vec!["k".into(), "a".into(), "b".into()]));
        let four = holders_of(
            b"k",
            Some(vec!["k".into(), "a".into(), "b".into(), "c".into()]),
        );
        // Without `at`: the current list, sent with no `AT`; a retry walks it after a grow.
        let current = PurchaseList {
            at: None,
            holders: Arc::clone(&three),
        };
        let first = router.probe_targets(b"k", current.clone(), b"t", None);
        assert_eq!((first.0, first.1.len()), (None, 3));
        assert_eq!(
            router.remembered_purchase(b"k", b"t", None),
            Some(current.clone())
        );
        let grown_now = PurchaseList {
            at: None,
            holders: Arc::clone(&four),
        };
        assert_eq!(router.probe_targets(b"k", grown_now, b"t", None), first);
        // A caller's `at` walks only a list remembered with that same `at`.
        assert_eq!(router.remembered_purchase(b"k", b"t", Some(1_000)), None);
        let at_first = PurchaseList {
            at: Some(1_000),
            holders: Arc::clone(&three),
        };
        let first = router.probe_targets(b"k", at_first.clone(), b"u", Some(1_000));
        assert_eq!((first.0, first.1.len()), (Some(1_000), 3));
        let grown = PurchaseList {
            at: Some(2_000),
            holders: Arc::clone(&four),
        };
        assert_eq!(
            router.remembered_purchase(b"k", b"u", None),
            Some(at_first.clone())
        );
        assert_eq!(
            router.remembered_purchase(b"k", b"u", Some(1_000)),
            Some(at_first)
        );
        assert_eq!(router.remembered_purchase(b"k", b"u", Some(2_000)), None);
        assert_eq!(router.probe_targets(b"k", grown.clone(), b"u", None), first);
        // Another `at`: the list at that time, remembered from then on.
        let other = router.probe_targets(b"k", grown.clone(), b"u", Some(2_000));
        assert_eq!((other.0, other.1.len()), (Some(2_000), 4));
        assert_eq!(router.remembered_purchase(b"k", b"u", None), Some(grown));
        assert_eq!(router.random_targets(&three).len(), 3, "every holder");
    }

    /// What a read of the list at a caller's time leads to: the list; the current list (None)
    /// when the home does not know it or the key is a holder's name; a time ahead of the
    /// home's clock waited for, or the error when that would pass the purchase wait; never
    /// another time.
    #[test]
    fn a_list_at_a_callers_time_is_read_or_waited_for() {
        let module = |text: &str| {
            let kind = ModuleError::from_text(text).expect("a module error");
            Err(CtrError::Module(kind, text.to_string()))
        };
        let ahead = |now: i64| {
            module(&format!(
                "ERR AT is ahead of the home's clock (now {now}): its holders then are not \
                 decided yet"
            ))
        };
        assert_eq!(home_clock(&ahead(1_234).unwrap_err()), Some(1_234));
        let ask = ListingAsk::new(5_000, Duration::from_secs(2));
        let names = Ok(vec!["k".to_string(), "a".to_string()]);
        match ask.next(b"k", names) {
            ListingStep::Done(Ok(Some(holders))) => assert_eq!(holders.len(), 2),
            _ => panic!("the list at 5000"),
        }
        for unknown in [
            "ERR wrong number of arguments for 'ctr.holders' command",
            "ERR the holder list at that time is not known: the counter was spread by an \
             earlier version (known from its next grow or shrink on)",
            "ERR the holder list at that time is not known (known from 77 on)",
            "ERR {ctr.1.0}k is a holder of the spread counter k: use the home key",
        ] {
            assert!(matches!(
                ask.next(b"k", module(unknown)),
                ListingStep::Done(Ok(None))
            ));
        }
        let too_old =
            module("ERR token event time is older than the dedup window (ctr.token-window-ms)");
        assert!(matches!(
            ask.next(b"k", too_old),
            ListingStep::Done(Err(CtrError::Module(ModuleError::TokenTooOld, _)))
        ));
        match ask.next(b"k", ahead(4_990)) {
            ListingStep::Again(pause) => assert_eq!(pause, Duration::from_millis(10)),
            _ => panic!("a wait for the home's clock"),
        }
        assert_eq!(ask.at, 5_000, "a caller's time is never replaced");
        assert!(matches!(
            ask.next(b"k", ahead(1_000)),
            ListingStep::Done(Err(CtrError::Module(ModuleError::HoldersAhead, _)))
        ));
        let unreplicated = || {
            module(
                "TRYAGAIN the replicas of the home's master do not hold its latest holder list \
                 change yet (a failover could lose it): retry CTR.HOLDERS AT",
            )
        };
        assert!(matches!(
            ask.next(b"k", unreplicated()),
            ListingStep::Again(pause) if pause == Duration::from_millis(10)
        ));
        let no_wait = ListingAsk::new(5_000, Duration::ZERO);
        assert!(matches!(
            no_wait.next(b"k", ahead(4_990)),
            ListingStep::Done(Err(CtrError::Module(ModuleError::HoldersAhead, _)))
        ));
        assert!(matches!(
            no_wait.next(b"k", unreplicated()),
            ListingStep::Done(Err(CtrError::Module(ModuleError::HoldersUnreplicated, _)))
        ));
    }

    #[test]
    fn a_token_keeps_its_first_holder_and_the_caches_are_bounded() {
        let router = SpreadRouter::new(Duration::from_secs(60));
        let home: Holders = holders_of(b"k", None);
        assert_eq!(router.target(b"k", &home, Some(b"t")).unwrap(), b"k");
        let spread = holders_of(b"k", Some(vec!["k".into(), "a".into(), "b".into()]));
        assert_eq!(router.target(b"k", &spread, Some(b"t")).unwrap(), b"k");
        let fresh_token = router.target(b"k", &spread, Some(b"u")).unwrap();
        assert_eq!(fresh_token, holder_for_token(&spread, b"u"));
        let mut bounded = Bounded::new(2);
        for i in 0..5 {
            bounded.insert(i, i);
        }
        assert_eq!((bounded.map.len(), bounded.order.len()), (2, 2));
        assert!(bounded.map.contains_key(&4) && !bounded.map.contains_key(&2));
    }

    /// A tokened add goes by the token rule over the whole list even when its holder is left
    /// out, and is refused unsent then: a retry whose first pick was forgotten, or made in
    /// another process, must reach the same holder.
    #[test]
    fn a_holder_out_of_reach_never_moves_a_token() {
        let router = SpreadRouter::new(Duration::from_secs(60));
        let spread = holders_of(
            b"k",
            Some(vec!["k".into(), "a".into(), "b".into(), "c".into()]),
        );
        let tokens: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
        let frozen = holder_for_token(&spread, tokens[0].as_bytes()).to_vec();
        router.timed_out_at(&frozen);
        let mut refused = 0;
        for token in tokens.iter().chain(&tokens) {
            let rule = holder_for_token(&spread, token.as_bytes());
            match router.target(b"k", &spread, Some(token.as_bytes())) {
                Ok(target) => assert_eq!(target, rule),
                Err(CtrError::HolderAway { holder }) => {
                    assert_eq!(holder, frozen);
                    refused += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(refused > 0);
        assert!(router.target(b"k", &spread, None).unwrap() != frozen);
    }

    /// A non-cluster connection's tokened adds skip the holders its server answered `MOVED`
    /// for (it can never write them): the rule over the others.
    #[test]
    fn a_token_skips_only_holders_its_server_does_not_serve() {
        let router = SpreadRouter::new(Duration::from_secs(60));
        let spread = holders_of(
            b"k",
            Some(vec!["k".into(), "a".into(), "b".into(), "c".into()]),
        );
        router.leave_out(b"b", SpreadRouter::ELSEWHERE, true);
        let served: Vec<Vec<u8>> = vec![b"k".to_vec(), b"a".to_vec(), b"c".to_vec()];
        for i in 0..40 {
            let token = format!("m{i}");
            let target = router
                .target(b"k", &spread, Some(token.as_bytes()))
                .unwrap();
            assert_eq!(target, holder_for_token(&served, token.as_bytes()));
        }
    }

    /// The members of a spread counter of four, the home first.
    fn four() -> Holders {
        holders_of(
            b"k",
            Some(vec!["k".into(), "a".into(), "b".into(), "c".into()]),
        )
    }

    fn module(kind: ModuleError, text: &str) -> Result<Option<i64>, CtrError> {
        Err(CtrError::Module(kind, text.to_string()))
    }

    /// Feeds `reply` to the add and returns the member it goes to next.
    fn sent_on(router: &SpreadRouter, route: &mut AddRoute<'_>, reply: Option<i64>) -> Vec<u8> {
        assert!(matches!(router.after_add(route, Ok(reply)), Step::Send));
        route.target.clone()
    }

    /// A tokened add refused (nil) by its token's holder walks the other members in the
    /// token's probe order without that holder, the same through any router, and is None
    /// once all four refused; a value ends the walk.
    #[test]
    fn a_refused_tokened_add_walks_the_probe_order_without_its_first_holder() {
        for token in ["w1", "w2", "w3", "w4", "w5", "w6"] {
            let holders = four();
            let first = holder_for_token(&holders, token.as_bytes()).to_vec();
            let rule: Vec<Vec<u8>> = probe_order(token.as_bytes(), 4)
                .into_iter()
                .map(|i| holders[i].clone())
                .filter(|m| *m != first)
                .collect();
            for router in [SpreadRouter::default(), SpreadRouter::default()] {
                let mut route = router
                    .route_add(b"k", Arc::clone(&holders), Some(token.as_bytes()))
                    .unwrap();
                assert_eq!(route.target, first);
                let walked: Vec<Vec<u8>> =
                    (0..3).map(|_| sent_on(&router, &mut route, None)).collect();
                assert_eq!(walked, rule, "{token}");
                match router.after_add(&mut route, Ok(None)) {
                    Step::Done(Ok(None)) => {}
                    _ => panic!("None once every member refused"),
                }
            }
            let router = SpreadRouter::default();
            let mut route = router
                .route_add(b"k", Arc::clone(&holders), Some(token.as_bytes()))
                .unwrap();
            sent_on(&router, &mut route, None);
            assert!(matches!(
                router.after_add(&mut route, Ok(Some(7))),
                Step::Done(Ok(Some(7)))
            ));
        }
    }

    /// The walk's list is remembered for the token: a retry through the same router walks
    /// the same members after a grow.
    #[test]
    fn a_retried_walk_keeps_its_list_after_a_grow() {
        let router = SpreadRouter::default();
        let grown = holders_of(
            b"k",
            Some(vec![
                "k".into(),
                "a".into(),
                "b".into(),
                "c".into(),
                "d".into(),
                "e".into(),
            ]),
        );
        let walk = |holders: Holders| {
            let mut route = router.route_add(b"k", holders, Some(b"g1")).unwrap();
            let mut members = vec![route.target.clone()];
            while let Step::Send = router.after_add(&mut route, Ok(None)) {
                members.push(route.target.clone());
            }
            members
        };
        let first = walk(four());
        assert_eq!(first.len(), 4);
        assert_eq!(walk(grown), first);
    }

    /// A member whose room is on its way (`TRYAGAIN budget in flight`) is asked again, never
    /// skipped nor taken for a refusal, and its error is returned once the wait is over; a
    /// holder folded back is passed; an untokened walk passes a member that did not run it
    /// and returns that error, not None, when every other refused.
    #[test]
    fn a_walk_waits_for_room_in_flight_and_passes_folded_holders() {
        let in_flight = || {
            module(
                ModuleError::BudgetInFlight,
                "TRYAGAIN budget in flight: the share of room is on its way",
            )
        };
        let folded = || module(ModuleError::HolderFolded, "ERR holder folded back");
        let router = SpreadRouter::default().with_purchase_wait(Duration::from_millis(30));
        let mut route = router.route_add(b"k", four(), Some(b"f1")).unwrap();
        let second = sent_on(&router, &mut route, None);
        let mut pauses = 0;
        loop {
            match router.after_add(&mut route, in_flight()) {
                Step::Pause(pause) => {
                    assert_eq!(route.target, second, "the same member");
                    std::thread::sleep(pause);
                    pauses += 1;
                }
                Step::Done(Err(e)) => {
                    assert_eq!(e.module_error(), Some(ModuleError::BudgetInFlight));
                    break;
                }
                _ => panic!("asked again, then the error"),
            }
        }
        assert!(pauses >= 2, "{pauses}");

        let mut route = router.route_add(b"k", four(), Some(b"f2")).unwrap();
        let mut second = sent_on(&router, &mut route, None);
        if second == b"k" {
            second = sent_on(&router, &mut route, None); // a home is never folded
        }
        assert!(matches!(
            router.after_add(&mut route, in_flight()),
            Step::Pause(_)
        ));
        let third = match router.after_add(&mut route, folded()) {
            Step::Send => route.target.clone(),
            _ => panic!("a folded holder is passed"),
        };
        assert_ne!(third, second);
        assert!(matches!(
            router.after_add(&mut route, Ok(Some(3))),
            Step::Done(Ok(Some(3)))
        ));

        // Untokened: a member that did not run it (a refused connection) is passed, and its
        // error is what a walk refused everywhere else returns.
        let refused = || {
            let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
            Err(CtrError::Redis(io.into()))
        };
        let router = SpreadRouter::default();
        let mut route = router.route_add(b"k", four(), None).unwrap();
        let mut visited = vec![route.target.clone()];
        visited.push(sent_on(&router, &mut route, None));
        let passed = route.target.clone();
        assert!(matches!(
            router.after_add(&mut route, refused()),
            Step::Send
        ));
        visited.push(route.target.clone());
        visited.push(sent_on(&router, &mut route, None));
        visited.sort();
        let mut every = four().to_vec();
        every.sort();
        assert_eq!(visited, every, "each member once");
        match router.after_add(&mut route, Ok(None)) {
            Step::Done(Err(e)) => assert!(e.is_connection_error(), "{e}"),
            _ => panic!("the error of the member not asked"),
        }
        assert!(router.away(&passed), "left out for a while");
        // Tokened: the same error stops the walk.
        let router = SpreadRouter::default();
        let mut route = router.route_add(b"k", four(), Some(b"f3")).unwrap();
        sent_on(&router, &mut route, None);
        assert!(matches!(
            router.after_add(&mut route, refused()),
            Step::Done(Err(_))
        ));
    }
}
