//! A coalescing writer: adds summed locally, each key's sum flushed as one
//! `CTR.ADD key sum TOKEN <writer id>:<sequence> AT <first send time>`.
//!
//! A sum whose reply is lost (a timeout, a dropped connection) is sent again with the same
//! token on a new connection, so it counts exactly once. Flushes happen every
//! [`WriterConfig::flush_interval`] or [`WriterConfig::flush_every`] adds, whichever comes
//! first, in a background thread; [`CoalescingWriter::close`] and `Drop` flush what is left.
//!
//! What a crash of the process can lose: the adds made since the last flush, and a sum sent
//! whose reply had not arrived (it counted once or not at all). Nothing counts twice as long as
//! a retry reaches the server within `ctr.token-window-ms` of the first send (a later one is
//! refused as too old, not counted). `std::process::exit` and a panic that aborts skip `Drop`:
//! call [`CoalescingWriter::close`] before them.
//!
//! Spread counters: each sum goes to the holder its token picks (the documented token rule,
//! holders learned by a [`SpreadRouter`], refreshed every [`WriterConfig::spread_refresh`]),
//! chosen at its first send and kept for its retries, so a retried sum reaches the holder that
//! may already have counted it. A sum that meets a holder a shrink folded back
//! ([`ModuleError::HolderFolded`]) did not count there (a folded holder answers a retry of a
//! write it counted with that write's first reply), so it is sent on with the same token to its
//! token's holder in the holder list read again, or to the home key when that one refused it
//! too ([`WriterStats::rerouted`]); it is dropped only when the home key itself refuses it (the
//! key given is not a home). [`ModuleError::HolderMoving`], [`ModuleError::BudgetInFlight`]
//! and [`ModuleError::AddAwaitsFold`] (`TRYAGAIN`: a holder folding back, which passes a new
//! token on only once its fold has landed) are retried like a lost connection, same holder.
//!
//! A sum a member of a spread counter refuses (a nil reply: a ceiled spread's positive sum at
//! a member whose share of the ceiling's room is full, a floored spread's negative sum at a
//! member whose share of the floor's room is used up) walks on, with the same token, to the
//! other members in its token's probe order ([`probe_order`], as [`SpreadRouter::add`]
//! walks), members left out for now last ([`WriterStats::walked`]); it is refused
//! ([`WriterStats::refused`]) only when every member refused it. A folded holder met
//! on the walk is passed as a refusal; a `TRYAGAIN` (room still on its way) is retried at the
//! same member as above, never skipped. A member of the walk that did not run it (`MOVED`, a
//! refused connection) is put back at the walk's end, once; the sum then stays with it (held
//! back as below) rather than being refused while that member has not answered.
//!
//! Holders out of reach: a sum that did not run on its holder (`MOVED` from the server of a
//! non-cluster connection, a connection to the holder's master refused), no earlier send of
//! which may have run, is sent on with the same token to its token's holder among the others
//! (counted in [`WriterStats::rerouted`]), and that holder is left out of new sums for a while
//! (as [`SpreadRouter`] does). A sum whose holder stays out of reach after its retries is held
//! back (same token, same holder, for the next flush) while the other sums of the flush go on;
//! the flush then fails with its error. When the writer cannot connect at all, the flush stops
//! at once.
//!
//! A frozen master (stopped, swapping, blocked by a slow command) is noticed only by
//! [`WriterConfig::timeout`]: a sum whose reply timed out may still count there, so it is held
//! back at once (same token, same holder; not retried in that flush) and that master's
//! holders are left out of new sums for a while (as [`SpreadRouter`] leaves them out of new
//! adds); while they are, the flushes do not send it (each send would cost another timeout)
//! and fail with a timeout error after sending every other sum. On a cluster connection each
//! sum goes as a one-command cluster pipeline, which the `redis` crate does not resend after a
//! timeout (see [`SpreadRouter`]). Closing (`close`, or drop) sends every sum not acknowledged
//! again, held back or not, for up to [`WriterConfig::close_timeout`] (default 10 s), then
//! reports those it could not deliver ([`WriterError::Undelivered`]).
//!
//! Memory is bounded: at most [`WriterConfig::max_keys`] keys are summed at a time (plus as
//! many sums sent and not yet acknowledged). An add of a new key when that many are pending
//! flushes first, in the caller's thread, and fails with [`WriterError::Full`] when that flush
//! fails.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionLike, RedisResult};

use crate::calls;
use crate::error::{CtrError, ModuleError};
use crate::spread::{
    holder_for_token, moved, not_run, probe_order, send_once, timed_out, SpreadRouter,
};
use crate::types::AddOptions;

/// How the writer makes connections (again, after one fails).
pub trait Connector: Send + 'static {
    type Connection: ConnectionLike + Send + 'static;
    fn connect(&self, timeout: Duration) -> RedisResult<Self::Connection>;
}

impl Connector for redis::Client {
    type Connection = redis::Connection;
    fn connect(&self, timeout: Duration) -> RedisResult<redis::Connection> {
        let con = self.get_connection_with_timeout(timeout)?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    }
}

#[cfg(feature = "cluster")]
impl Connector for redis::cluster::ClusterClient {
    type Connection = redis::cluster::ClusterConnection;
    fn connect(&self, timeout: Duration) -> RedisResult<Self::Connection> {
        let con = self.get_connection()?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    }
}

/// Settings of a [`CoalescingWriter`].
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Flush at least this often.
    pub flush_interval: Duration,
    /// Flush after this many adds.
    pub flush_every: u64,
    /// Keys summed at a time, at most.
    pub max_keys: usize,
    /// Prefix of every token; two writers alive at the same time must never share one.
    pub writer_id: String,
    /// Sends of one sum after the first, on a connection error or timeout, before a flush fails.
    pub retries: u32,
    /// Pause before the n-th retry: n times this.
    pub retry_backoff: Duration,
    /// Connect, read and write timeout of the writer's connection.
    pub timeout: Duration,
    /// How long a spread counter's holders are trusted before `CTR.HOLDERS` is read again;
    /// None sends every sum to its key as given (no `CTR.HOLDERS`).
    pub spread_refresh: Option<Duration>,
    /// How long `close` (and drop) keeps sending the sums not yet acknowledged, each again
    /// with its token (held back or not), before it reports those it could not deliver
    /// ([`WriterError::Undelivered`]).
    pub close_timeout: Duration,
}

impl Default for WriterConfig {
    fn default() -> WriterConfig {
        WriterConfig {
            flush_interval: Duration::from_millis(100),
            flush_every: 10_000,
            max_keys: 100_000,
            writer_id: random_writer_id(),
            retries: 5,
            retry_backoff: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
            spread_refresh: Some(SpreadRouter::DEFAULT_REFRESH),
            close_timeout: Duration::from_secs(10),
        }
    }
}

/// 16 hex digits from the std hasher's random keys, the time and the process id.
fn random_writer_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(unix_ms() as u128);
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What a writer did since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// `add` calls recorded.
    pub adds: u64,
    /// `CTR.ADD` commands sent, retries included.
    pub commands: u64,
    /// Sums acknowledged by the server.
    pub flushed_sums: u64,
    /// Sends repeated with the same token after a connection error or timeout.
    pub retries: u64,
    /// Sums refused (nil reply) by a floor or a ceiling, by every member of a spread counter:
    /// not applied.
    pub refused: u64,
    /// Sums the server refused with an error: not applied.
    pub dropped: u64,
    /// Sums sent to another holder (or the home key) because a shrink had folded their holder
    /// back into its home before they reached it, or because it did not run them (`MOVED`, a
    /// refused connection): not applied there, so sent on.
    pub rerouted: u64,
    /// Sends of a sum to the next member of a spread counter after a member refused it (nil:
    /// its share of the floor's or the ceiling's room is used up).
    pub walked: u64,
}

/// Why an add or a flush failed.
#[derive(Debug)]
pub enum WriterError {
    /// A new key while `max_keys` keys are pending, and the flush to make room failed.
    Full(CtrError),
    /// The writer is closed.
    Closed,
    /// A flush could not reach the server; its sums are kept for the next flush.
    Flush(CtrError),
    /// `close` ran out of `close_timeout` with sums not acknowledged: each counted once or not
    /// at all (a resend with its token counts it at most once, inside `ctr.token-window-ms`).
    Undelivered {
        /// `(key, delta, token)` of each sum not delivered (no token: never sent).
        sums: Vec<(Vec<u8>, i64, Option<Vec<u8>>)>,
        /// The last send's error.
        error: CtrError,
    },
}

impl std::fmt::Display for WriterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriterError::Full(e) => write!(f, "writer full and the flush failed: {e}"),
            WriterError::Closed => f.write_str("writer closed"),
            WriterError::Flush(e) => write!(f, "flush failed: {e}"),
            WriterError::Undelivered { sums, error } => {
                let units: i64 = sums
                    .iter()
                    .map(|(_, delta, _)| delta.saturating_abs())
                    .sum();
                write!(
                    f,
                    "{} sums ({units} units) not delivered within close_timeout (each counted \
                     once or not at all): {error}",
                    sums.len()
                )
            }
        }
    }
}

impl std::error::Error for WriterError {}

/// The error of a flush that held back a sum whose holder's master timed out lately.
const HELD_BACK: &str =
    "a sum is held back: its holder's master timed out lately (it may still count it)";

struct Sum {
    key: Vec<u8>,
    delta: i64,
    options: AddOptions,
    /// The holder it is sent to: chosen at its first send, kept for its retries.
    target: Option<Vec<u8>>,
    /// Holders it did not count at: refused it (nil, or as folded back), or never ran it.
    passed: Vec<Vec<u8>>,
    /// Once a member refused it (nil): the members still to visit, in its token's probe order.
    walk: Option<VecDeque<Vec<u8>>>,
    /// Members of the walk that did not run it (`MOVED`, a refused connection), put back at
    /// its end once each.
    deferred: Vec<Vec<u8>>,
    /// True once a send of it may have run (a reply lost): from then on it goes nowhere else.
    maybe_counted: bool,
}

#[derive(Default)]
struct Pending {
    sums: HashMap<Vec<u8>, i64>,
    since_flush: u64,
    flush_requested: bool,
    closed: bool,
    adds: u64,
}

struct Flusher<C: Connector> {
    connector: C,
    connection: Option<C::Connection>,
    /// The last send failed to connect at all (not to one holder's master): nothing can go.
    connect_failed: bool,
    /// Set by `close`: every sum is sent, none held back (see [`Flusher::held_back`]).
    closing: bool,
    router: Option<SpreadRouter>,
    unacked: VecDeque<Sum>,
    sequence: u64,
    stats: WriterStats,
}

struct Shared<C: Connector> {
    config: WriterConfig,
    pending: Mutex<Pending>,
    wake: Condvar,
    flusher: Mutex<Flusher<C>>,
}

/// Sums adds per key and flushes them as tokened `CTR.ADD`s (see the [module](self) docs).
pub struct CoalescingWriter<C: Connector> {
    shared: Arc<Shared<C>>,
    thread: Option<JoinHandle<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves plain data behind: keep using it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<C: Connector> CoalescingWriter<C> {
    /// A writer that connects with `connector` (a `redis::Client`, or a
    /// `redis::cluster::ClusterClient` with the `cluster` feature).
    /// `flush_every` and `max_keys` below 1 count as 1.
    pub fn new(connector: C, mut config: WriterConfig) -> CoalescingWriter<C> {
        config.flush_every = config.flush_every.max(1);
        config.max_keys = config.max_keys.max(1);
        let router = config.spread_refresh.map(SpreadRouter::new);
        let shared = Arc::new(Shared {
            config,
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            flusher: Mutex::new(Flusher {
                connector,
                connection: None,
                connect_failed: false,
                closing: false,
                router,
                unacked: VecDeque::new(),
                sequence: 0,
                stats: WriterStats::default(),
            }),
        });
        let background = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("redis-ctr-writer".into())
            .spawn(move || background.run())
            .expect("spawn the writer's flush thread");
        CoalescingWriter {
            shared,
            thread: Some(thread),
        }
    }

    /// Adds `delta` to `key`; sent with the next flush.
    pub fn add(&self, key: impl AsRef<[u8]>, delta: i64) -> Result<(), WriterError> {
        let key = key.as_ref();
        if self.shared.record(key, delta)? {
            return Ok(());
        }
        self.shared.flush().map_err(WriterError::Full)?;
        match self.shared.record(key, delta)? {
            true => Ok(()),
            false => Err(WriterError::Full(CtrError::Reply(
                "no room after a flush".into(),
            ))),
        }
    }

    /// Sends every pending sum now, first any sum still unacknowledged (with its token).
    pub fn flush(&self) -> Result<(), WriterError> {
        self.shared.flush().map_err(WriterError::Flush)
    }

    /// What the writer did so far.
    pub fn stats(&self) -> WriterStats {
        let mut stats = lock(&self.shared.flusher).stats;
        stats.adds = lock(&self.shared.pending).adds;
        stats
    }

    /// Stops the flush thread and flushes what is left: a sum not acknowledged (a reply that
    /// timed out, a server out of reach) is sent again with its token every 50 ms to 1 s, held
    /// back or not, for up to `close_timeout`. The final stats, or
    /// [`WriterError::Undelivered`] listing the sums it could not deliver.
    pub fn close(mut self) -> Result<WriterStats, WriterError> {
        self.shutdown()?;
        Ok(self.stats())
    }

    fn shutdown(&mut self) -> Result<(), WriterError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        lock(&self.shared.pending).closed = true;
        self.shared.wake.notify_all();
        let _ = thread.join();
        lock(&self.shared.flusher).closing = true;
        let deadline = Instant::now() + self.shared.config.close_timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            match self.shared.flush() {
                Ok(()) => return Ok(()),
                Err(error) if Instant::now() + pause >= deadline => {
                    return Err(self.shared.undelivered(error));
                }
                Err(_) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

impl<C: Connector> Drop for CoalescingWriter<C> {
    /// Flushes what is left; a failure can only be reported on stderr here (use `close` to
    /// handle it).
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("redis-ctr writer {}: {e}", self.shared.config.writer_id);
        }
    }
}

impl<C: Connector> Shared<C> {
    /// The report of a `close` that ran out of time: the sums not acknowledged, then those
    /// never sent.
    fn undelivered(&self, error: CtrError) -> WriterError {
        let flusher = lock(&self.flusher);
        let mut sums: Vec<_> = flusher
            .unacked
            .iter()
            .map(|s| (s.key.clone(), s.delta, s.options.token.clone()))
            .collect();
        let pending = lock(&self.pending);
        sums.extend(
            pending
                .sums
                .iter()
                .filter(|&(_, &delta)| delta != 0)
                .map(|(key, &delta)| (key.clone(), delta, None)),
        );
        WriterError::Undelivered { sums, error }
    }

    /// False when the key cannot be taken without a flush first (a new key at the cap, or a
    /// sum leaving the 64-bit range).
    fn record(&self, key: &[u8], delta: i64) -> Result<bool, WriterError> {
        let mut pending = lock(&self.pending);
        if pending.closed {
            return Err(WriterError::Closed);
        }
        let at_cap = pending.sums.len() >= self.config.max_keys;
        let slot = match pending.sums.get_mut(key) {
            Some(sum) => sum,
            None if at_cap => return Ok(false),
            None => pending.sums.entry(key.to_vec()).or_insert(0),
        };
        let Some(total) = slot.checked_add(delta) else {
            return Ok(false);
        };
        *slot = total;
        pending.adds += 1;
        pending.since_flush += 1;
        if pending.since_flush >= self.config.flush_every {
            pending.since_flush = 0;
            pending.flush_requested = true;
            self.wake.notify_one();
        }
        Ok(true)
    }

    fn run(&self) {
        loop {
            {
                let pending = lock(&self.pending);
                let (pending, _) = self
                    .wake
                    .wait_timeout_while(pending, self.config.flush_interval, |p| {
                        !p.flush_requested && !p.closed
                    })
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                if pending.closed {
                    return;
                }
            }
            // A failed flush keeps its sums; the next tick tries again.
            let _ = self.flush();
        }
    }

    fn flush(&self) -> Result<(), CtrError> {
        let mut flusher = lock(&self.flusher);
        // Sums held back from before do not hold back the new ones, unless nothing can go.
        let held = self.send_unacked(&mut flusher);
        if held.is_err() && flusher.connect_failed {
            return held;
        }
        let sums = {
            let mut pending = lock(&self.pending);
            pending.since_flush = 0;
            pending.flush_requested = false;
            std::mem::take(&mut pending.sums)
        };
        let at = unix_ms();
        for (key, delta) in sums.into_iter().filter(|&(_, delta)| delta != 0) {
            flusher.sequence += 1;
            let token = format!("{}:{}", self.config.writer_id, flusher.sequence);
            let options = AddOptions::new().token(token).at(at);
            flusher.unacked.push_back(Sum {
                key,
                delta,
                options,
                target: None,
                passed: Vec::new(),
                walk: None,
                deferred: Vec::new(),
                maybe_counted: false,
            });
        }
        let sent = self.send_unacked(&mut flusher);
        held.and(sent)
    }

    /// Sends every unacknowledged sum. One whose holder stays out of reach is held back (kept,
    /// same token and holder, for the next flush) while the others go on; then the last such
    /// error is returned. When no connection can be made at all, it stops at once.
    fn send_unacked(&self, flusher: &mut Flusher<C>) -> Result<(), CtrError> {
        let mut held = VecDeque::new();
        let mut error = None;
        while let Some(mut sum) = flusher.unacked.pop_front() {
            if flusher.held_back(&sum) {
                held.push_back(sum);
                let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, HELD_BACK);
                error = error.or(Some(CtrError::Redis(timeout.into())));
                continue;
            }
            if let Err(e) = self.send(flusher, &mut sum) {
                held.push_back(sum);
                error = Some(e);
                if flusher.connect_failed {
                    break;
                }
            }
        }
        while let Some(sum) = held.pop_back() {
            flusher.unacked.push_front(sum);
        }
        error.map_or(Ok(()), Err)
    }

    /// Ok once the server has decided on the sum (applied, refused by a floor, or rejected
    /// with one of the module's final errors); the last error when it stays out of reach. A
    /// holder folded back sends it on (see the [module](self) docs).
    fn send(&self, flusher: &mut Flusher<C>, sum: &mut Sum) -> Result<(), CtrError> {
        let mut retries = 0;
        loop {
            flusher.stats.commands += 1;
            let sent = match flusher.send_once(sum, self.config.timeout) {
                // A holder folded back, met on the walk: passed, as a refusal.
                Err(CtrError::Module(ModuleError::HolderFolded, _)) if sum.walk.is_some() => {
                    Ok(None)
                }
                Err(CtrError::Module(ModuleError::HolderFolded, text)) => {
                    match flusher.reroute(sum, self.config.timeout) {
                        Ok(true) => {
                            flusher.stats.rerouted += 1;
                            continue;
                        }
                        Ok(false) => Err(CtrError::Module(ModuleError::HolderFolded, text)),
                        Err(e) => Err(e),
                    }
                }
                sent => sent,
            };
            match sent {
                Ok(Some(_)) => flusher.stats.flushed_sums += 1,
                Ok(None) if flusher.walk_on(sum) => {
                    flusher.stats.walked += 1;
                    continue;
                }
                Ok(None) => flusher.stats.refused += 1,
                Err(CtrError::Module(kind, _)) if !is_transient(kind) => flusher.stats.dropped += 1,
                Err(CtrError::Reply(_)) => flusher.stats.dropped += 1,
                // Never ran there (MOVED, a refused connection to the holder's master) and no
                // earlier send may have: on to another holder.
                Err(e) if !flusher.connect_failed && flusher.elsewhere(sum, &e) => {
                    flusher.stats.rerouted += 1;
                    continue;
                }
                // A lost connection, a timeout, a node failing over, a holder being moved:
                // the sum may or may not have counted; the same token makes the retry safe.
                Err(e) => {
                    sum.maybe_counted |= !flusher.connect_failed;
                    if timed_out(&e) {
                        // Its master is frozen or overloaded (it may still count the sum): held
                        // back at once, the others go on. The connection stays (it skips the
                        // late reply), a new one would wait for that master again.
                        flusher.timed_out(sum);
                        return Err(e);
                    }
                    flusher.connection = None;
                    if retries == self.config.retries {
                        return Err(e);
                    }
                    retries += 1;
                    flusher.stats.retries += 1;
                    std::thread::sleep(self.config.retry_backoff * retries);
                    continue;
                }
            }
            return Ok(());
        }
    }
}

/// Module errors that go away by themselves (`TRYAGAIN`): the sum is sent again, same key
/// (a holder folding back passes a new token on only once its fold has landed).
fn is_transient(kind: ModuleError) -> bool {
    matches!(
        kind,
        ModuleError::HolderMoving | ModuleError::BudgetInFlight | ModuleError::AddAwaitsFold
    )
}

impl<C: Connector> Flusher<C> {
    /// The holder `sum` goes to: its target, or its key before it has one.
    fn target(sum: &Sum) -> &[u8] {
        sum.target.as_deref().unwrap_or(&sum.key)
    }

    /// True for a sum that may have counted at a holder left out for now (its master timed
    /// out): it waits for that holder instead of costing every flush another timeout.
    fn held_back(&self, sum: &Sum) -> bool {
        !self.closing
            && sum.maybe_counted
            && self
                .router
                .as_ref()
                .is_some_and(|router| router.away(Flusher::<C>::target(sum)))
    }

    /// `sum`'s reply timed out: its holder's master is left out of new sums for a while.
    fn timed_out(&self, sum: &Sum) {
        if let Some(router) = &self.router {
            router.timed_out_at(Flusher::<C>::target(sum));
        }
    }

    /// After `error` from `sum`'s holder: true when the sum is to be sent on because it never
    /// ran there (`MOVED`, a refused connection) and no earlier send of it may have, to its
    /// token's holder among the others not left out (or the home key); that holder is left
    /// out of new sums for a while. False for the home key itself, or without a router. Once
    /// the sum walks (a member refused it), it goes on to the next member of its walk instead
    /// (see [`Flusher::walk_past`]).
    fn elsewhere(&mut self, sum: &mut Sum, error: &CtrError) -> bool {
        let (Some(router), Some(away)) = (&self.router, not_run(error)) else {
            return false;
        };
        let target = sum.target.clone().unwrap_or_else(|| sum.key.clone());
        if sum.maybe_counted {
            return false;
        }
        if sum.walk.is_some() {
            router.leave_out(&target, away, moved(error));
            return self.walk_past(sum, target);
        }
        if target == sum.key {
            return false;
        }
        let Some(connection) = self.connection.as_mut() else {
            return false;
        };
        router.leave_out(&target, away, moved(error));
        sum.passed.push(target);
        let holders = match router.holders(connection, &sum.key) {
            Ok(holders) => router.reachable(&holders),
            Err(_) => Vec::new(),
        };
        let current: Vec<Vec<u8>> = holders
            .into_iter()
            .filter(|h| !sum.passed.contains(h))
            .collect();
        let token = sum.options.token.as_deref().unwrap_or_default();
        sum.target = Some(if current.is_empty() {
            sum.key.clone()
        } else {
            holder_for_token(&current, token).to_vec()
        });
        true
    }

    /// After `sum`'s target refused it (nil), or passed it as a holder folded back once it
    /// walks: true when it goes on to the next member of its walk (the first refusal starts
    /// the walk, in its token's probe order over the holders, those passed left out); false
    /// when every member refused it, or the key is not spread (the refusal is final).
    fn walk_on(&mut self, sum: &mut Sum) -> bool {
        let Some(router) = &self.router else {
            return false;
        };
        let target = Flusher::<C>::target(sum).to_vec();
        if sum.walk.is_none() {
            let Some(connection) = self.connection.as_mut() else {
                return false;
            };
            let Ok(holders) = router.holders(connection, &sum.key) else {
                return false;
            };
            if holders.len() < 2 {
                return false;
            }
            let token = sum.options.token.as_deref().unwrap_or_default();
            let order = probe_order(token, holders.len()).into_iter();
            let members = order.map(|i| holders[i].clone());
            sum.walk = Some(
                members
                    .filter(|m| *m != target && !sum.passed.contains(m))
                    .collect(),
            );
        }
        sum.passed.push(target);
        self.next_member(sum)
    }

    /// The next member of `sum`'s walk, the first one not left out (else the next one); false
    /// when none is left.
    fn next_member(&self, sum: &mut Sum) -> bool {
        let Some(walk) = sum.walk.as_mut() else {
            return false;
        };
        let reachable = self.router.as_ref().map_or(0, |router| {
            walk.iter().position(|m| !router.away(m)).unwrap_or(0)
        });
        let Some(next) = walk.remove(reachable) else {
            return false;
        };
        sum.target = Some(next);
        // It did not count at the members passed: whatever an earlier send of it was, they
        // answered for its token.
        sum.maybe_counted = false;
        true
    }

    /// A member of `sum`'s walk, `target`, did not run it (`MOVED`, a refused connection):
    /// true when it goes on to the next member, `target` put back at the walk's end (once);
    /// false when `target` was put back before or is the last one left (the sum stays with it:
    /// it is never refused while a member has not answered).
    fn walk_past(&mut self, sum: &mut Sum, target: Vec<u8>) -> bool {
        let Some(walk) = sum.walk.as_mut() else {
            return false;
        };
        if walk.is_empty() || sum.deferred.contains(&target) {
            return false;
        }
        walk.push_back(target.clone());
        sum.deferred.push(target);
        self.next_member(sum)
    }

    /// After `sum`'s target refused it as a holder folded back: true when it is to be sent on,
    /// to its token's holder in the holder list read again (not from the cache), or to the
    /// home key when that one refused it too (a home is never folded); false when its target
    /// was the home key already (then the refusal is final).
    fn reroute(&mut self, sum: &mut Sum, timeout: Duration) -> Result<bool, CtrError> {
        let target = sum.target.take().unwrap_or_else(|| sum.key.clone());
        if target == sum.key {
            sum.target = Some(target);
            return Ok(false);
        }
        sum.passed.push(target);
        let chosen = match &self.router {
            None => sum.key.clone(),
            Some(router) => {
                let connection = match self.connection.take() {
                    Some(connection) => connection,
                    None => self.connector.connect(timeout)?,
                };
                let connection = self.connection.insert(connection);
                router.forget(&sum.key);
                let holders = router.holders(connection, &sum.key);
                let token = sum.options.token.as_deref().unwrap_or_default();
                match holders {
                    Ok(holders) => holder_for_token(&holders, token).to_vec(),
                    Err(e) => {
                        // Sent again later: to the same holder, which refuses it again.
                        sum.target = sum.passed.pop();
                        return Err(e);
                    }
                }
            }
        };
        sum.target = Some(if sum.passed.contains(&chosen) {
            sum.key.clone()
        } else {
            chosen
        });
        Ok(true)
    }

    fn send_once(&mut self, sum: &mut Sum, timeout: Duration) -> Result<Option<i64>, CtrError> {
        self.connect_failed = false;
        let connection = match self.connection.take() {
            Some(connection) => connection,
            None => self.connector.connect(timeout).map_err(|e| {
                self.connect_failed = true;
                CtrError::from(e)
            })?,
        };
        let connection = self.connection.insert(connection);
        let target = match (&sum.target, &self.router) {
            (Some(target), _) => target,
            (None, None) => &sum.key,
            (None, Some(router)) => {
                // A new sum: its token's holder among those not left out (its token goes with
                // it, so any holder is right).
                let holders = router.holders(connection, &sum.key)?;
                if holders.len() > 1 {
                    router.learn_slots(connection, &sum.key);
                }
                let holders = router.reachable(&holders);
                let token = sum.options.token.as_deref().unwrap_or_default();
                sum.target
                    .insert(holder_for_token(&holders, token).to_vec())
            }
        };
        send_once(
            connection,
            calls::add_with(target.as_slice(), sum.delta, &sum.options),
        )
    }
}
