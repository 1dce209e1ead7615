//! Gathered reads of a spread counter: CTR.GET, CTR.MGET and CTR.INFO of a home key give the
//! total over every holder, and CTR.CLEAR of a home gathers its holders the same way.
//!
//! Outside a cluster a read takes every holder at once. In a cluster it blocks the client and
//! waits for a **gather**: one per home (database, name and holder list, which names the
//! spread's id), which asks each other master for its holders over the cluster bus (requests
//! split to what a receiver takes, each with its own request id, resent until answered), reads
//! the holders this node serves from a timer, all through `RM_Call`, which checks slot
//! ownership, and hands every read waiting for it the holders' values once everything is in.
//! A holder that a master no longer serves is asked once more where a fresh slot map says it
//! is now; one still migrating there, or not served a second time, fails the round with
//! TRYAGAIN, and its reads gather again a moment later within `ctr.purchase-wait-ms` of their
//! arrival (`read_handoff`), then fail with it. A read of a home whose own slot is being handed
//! over waits there for the handoff's end before it gathers. After `ctr.gather-timeout-ms` a
//! read fails, never with a partial sum. Where a
//! client cannot block (MULTI/EXEC, scripts), a read in a cluster whose holders are not in the
//! cache (`ctr.gather-cache-ms`) fails with a clear error.
//!
//! **Shared gathers.** A read must count every add completed before it began, so it may only
//! use a gather that starts after it arrived: requests already sent may have missed those adds.
//! Per home there is at most one gather in flight and one queued: a read that finds none starts
//! one at once; a read that finds one in flight joins the queued one (made if needed), which
//! starts when the one in flight settles (answered, failed, or left by all its reads). One
//! gather serves every read waiting for it, and a read waits for one gather only. A clear
//! gathers alone (it writes), as before. The table of rounds and reads is
//! `protocol::gather`; this file blocks the clients, sends, records and replies.
//!
//! **Bounds** (docs/RELIABILITY.md): at most [`MAX_WAITING_READS`] reads wait at once and
//! pending gathers hold at most [`MAX_GATHER_NAME_BYTES`] of holder names (each gather's names
//! once, shared by its reads); past either, a read fails at once with
//! `ERR spread counter total unavailable: ... retry later`. A waiting read keeps no copy of the
//! holder names; a resend copies only the requests of the masters still silent, once per
//! gather, never per read.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::bounded_view::{self as bounded, BoundedView};
use super::ctr_store::{select_db, value_and_floor, with_counter};
use super::read_handoff::{self, Outcome};
use super::read_links;
use super::scheduler::{self, Job, When};
use super::spread_cluster::{self as cluster, Caller, NodeId};
use super::spread_transfer::{run_machine, RedisHost};
use super::waiter::{self, Answered};
use crate::config;
use crate::counter::spread::parse_holder_name;
use crate::counter::{CounterRef, TokenStamp};
use crate::ffi::{
    rm, string_bytes, Args, CommandError, CommandResult, Ctx, KeyName, RawString, Reply,
};
use crate::metrics;
use crate::persist::gather_msg;
use crate::protocol::gather::{self, Plan, Reading, Round};
use crate::protocol::gather_node::{self, read_of, GatherFailure, GatherNode};
use crate::protocol::messages::MessageKind;

/// Bus message types (0-254): a gather request and its response.
/// The gather table (`protocol::gather`) with this runtime's reply and error types.
type Node = GatherNode<Ending, CommandError, NodeId>;
type Reader = gather::Reader<Ending>;
type Effect = gather::Effect<Ending, CommandError>;

/// How a blocked read ends: its reply, and the database its keys are in (to read them again
/// when it gathers again, `read_handoff`).
struct Ending {
    how: Finish,
    db: c_int,
}

/// A read's client blocked already (a read gathering again after a wait), and when the read
/// arrived.
#[derive(Clone, Copy)]
struct Blocked {
    bc: Answered,
    started_ms: i64,
}

const MSG_GATHER_REQUEST: MessageKind = MessageKind::GatherRequest;
const MSG_GATHER_RESPONSE: MessageKind = MessageKind::GatherResponse;

const CANNOT_BLOCK: CommandError = CommandError::fixed(
    "ERR spread counter total needs a gather from other masters, which cannot wait inside MULTI/EXEC or a script (read it outside, or set ctr.gather-cache-ms)",
);
/// The same wait refused for a clear of a spread counter's total (which never uses the cache:
/// it must clear every add completed before it).
const CANNOT_BLOCK_CLEAR: CommandError = CommandError::fixed(
    "ERR spread counter total needs a gather from other masters, which cannot wait inside MULTI/EXEC or a script (clear it outside)",
);
const OVERFLOW: CommandError = CommandError::fixed("ERR counter overflow");

/// The most reads of spread counters that wait for gathers at once on this node.
pub const MAX_WAITING_READS: usize = 10_000;
/// The most bytes of holder names that pending gathers hold on this node (each gather holds
/// its home's names once; a home has at most two gathers pending).
pub const MAX_GATHER_NAME_BYTES: usize = 64 << 20;
const TOO_MANY_READS: CommandError = CommandError::fixed(
    "ERR spread counter total unavailable: 10000 reads are already waiting for gathers on this node, retry later",
);
const TOO_MANY_NAMES: CommandError = CommandError::fixed(
    "ERR spread counter total unavailable: pending gathers already hold 64 MB of holder names on this node, retry later",
);

/// How often one timer looks for rounds due a resend. One timer for every round, not one per
/// round: a module timer due within the next millisecond delays every 0 ms timer made after the
/// server's timer handler last ran by up to a millisecond (the handler reschedules itself at
/// least 1 ms ahead), and per-round timers, one made for each of a thousand rounds a second,
/// kept one always due.
const RESEND_TICK_MS: i64 = 100;

/// True when a read of `key` gives its own units only: a key named as a holder never gathers
/// (whatever holder list it carries, say after a home was renamed onto a holder's name), nor
/// does any read made while gathering, so no read ever recurses into a holder's holders.
fn reads_own_units_only(key: &[u8]) -> bool {
    parse_holder_name(key).is_some() || cluster::reading_a_holder()
}

fn holders_of(c: Option<CounterRef>) -> Option<Vec<Vec<u8>>> {
    match c {
        Some(CounterRef::Boxed(b)) => b.spread().map(|s| s.holders.clone()),
        _ => None,
    }
}

/// The holders a read of the total asks: the current ones, then those still folding back.
fn all_holders_of(c: Option<CounterRef>) -> (Vec<Vec<u8>>, usize) {
    let mut holders = holders_of(c).unwrap_or_default();
    let current = holders.len();
    if let Some(CounterRef::Boxed(b)) = c {
        holders.extend(b.leaving().iter().map(|l| l.name.clone()));
    }
    (holders, current)
}

/// The indexes of `holders` that the counter `c` lists neither as current nor as leaving.
fn unlisted(c: CounterRef, holders: &[Vec<u8>]) -> Vec<usize> {
    let CounterRef::Boxed(b) = c else {
        return (0..holders.len()).collect();
    };
    let current = b.spread().map_or(&[][..], |s| &s.holders[..]);
    let listed = || {
        let leaving = b.leaving().iter().map(|l| l.name.as_slice());
        current.iter().map(Vec::as_slice).chain(leaving)
    };
    if listed().count() == holders.len() && listed().zip(holders).all(|(a, b)| a == b.as_slice()) {
        return Vec::new(); // the common case: the lists the read was made of, unchanged
    }
    let set: HashSet<&[u8]> = listed().collect();
    (0..holders.len())
        .filter(|&i| !set.contains(holders[i].as_slice()))
        .collect()
}

pub(crate) fn names_reply<'a>(home: &[u8], holders: impl Iterator<Item = &'a Vec<u8>>) -> Reply {
    let mut names = vec![Reply::Bulk(home.to_vec())];
    names.extend(holders.map(|h| Reply::Bulk(h.clone())));
    Reply::Array(names)
}

/// How a finished read replies.
enum Finish {
    Get,
    MGet,
    /// The map of CTR.INFO, whose value becomes the total and which gains the holders (and,
    /// for a bounded home, the fields of its floor and ceiling).
    Info(Vec<(&'static str, Reply)>, Option<BoundedView>),
    /// A write of a home's total (CTR.CLEAR, CTR.RECONCILE): the gathered holders go to the
    /// caller's `apply` (`spread_clear`'s, `spread_reconcile`'s), in the step that replies.
    Clear(TotalWrite, ApplyTotal),
}

/// What a write of a spread home's total carries to its `apply` through the gather: the
/// clear's token stamp, the truth a reconcile sets the total to.
#[derive(Debug, Clone, Copy, Default)]
pub struct TotalWrite {
    pub token: Option<TokenStamp>,
    pub truth: Option<i64>,
}

/// What completes a write of a home's total once every holder answered: the home's name, each
/// holder's gathered units by name, and what the write carries. Passed in by the write's own
/// module, so that reads never depend on it.
pub type ApplyTotal = fn(Ctx, &[u8], Vec<(&[u8], i64)>, TotalWrite) -> CommandResult;

fn reading(ctx: Ctx, key: RawString) -> Result<Reading, CommandError> {
    let own_units_only = reads_own_units_only(string_bytes(key));
    // SAFETY: ctx is live.
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) };
    let home = string_bytes(key);
    with_counter(ctx, key, |c| {
        let (holders, current) = match c {
            _ if own_units_only => (Rc::default(), 0),
            // A home with gathers pending shares their holder names (a storm of reads of one
            // home of 1,024 long names copies none of them).
            Some(CounterRef::Boxed(b)) => {
                match pending_names(db, home, b).or_else(|| cached_names(home, b)) {
                    Some(shared) => shared,
                    None => {
                        let (holders, current) = all_holders_of(c);
                        (Rc::new(holders), current)
                    }
                }
            }
            _ => (Rc::default(), 0),
        };
        Reading {
            home: home.to_vec(),
            holders,
            current,
            values: vec![Some(c.map_or(0, held))],
            ages: vec![0],
            floors: vec![value_and_floor(c).1],
            ceilings: vec![own_ceiling(c)],
        }
    })
}

/// The holder names of a pending gather of `home` whose holder list is the counter's own
/// (current holders, then leaving ones), with the count of current ones.
/// The cache's copy of `b`'s holder names when it has one for exactly these holders (none
/// folding back): a hot counter read from the cache copies no name.
fn cached_names(home: &[u8], b: &crate::counter::Counter) -> Option<(Rc<Vec<Vec<u8>>>, usize)> {
    if !b.leaving().is_empty() {
        return None;
    }
    let current = b.spread().map_or(&[][..], |s| &s.holders[..]);
    CACHE.with(|c| {
        let c = c.borrow();
        let cached = c.get(home)?;
        (cached.holders[..] == *current).then(|| (cached.holders.clone(), current.len()))
    })
}

fn pending_names(
    db: i32,
    home: &[u8],
    b: &crate::counter::Counter,
) -> Option<(Rc<Vec<Vec<u8>>>, usize)> {
    let current = b.spread().map_or(&[][..], |s| &s.holders[..]);
    let leaving = b.leaving();
    GATHERS.with(|g| {
        let g = g.try_borrow().ok()?;
        let list = g.table.homes.get(&(db, home.to_vec()))?;
        let found = list.iter().find(|h| {
            h.current == current.len()
                && h.holders.len() == current.len() + leaving.len()
                && h.holders[..current.len()] == *current
                && h.holders[current.len()..]
                    .iter()
                    .zip(leaving)
                    .all(|(a, l)| *a == l.name)
        })?;
        Some((found.holders.clone(), found.current))
    })
}

/// A key's own ceiling (None: it has none).
fn own_ceiling(c: Option<CounterRef>) -> Option<i64> {
    match c {
        Some(CounterRef::Boxed(b)) => b.ceiling().map(|x| x.ceiling),
        _ => None,
    }
}

/// What a key counts for in a total: its value plus the value units it has sent and not had
/// acknowledged (a sealed holder's whole value until its home has it). A sum that overflows
/// (only a forged state holds one) counts the value alone.
fn held(c: CounterRef) -> i64 {
    match c {
        // A windowed counter is never spread: its value is what its window holds now.
        CounterRef::Boxed(b) if b.window().is_some() => b.value_at(crate::ffi::coarse_now_ms()),
        CounterRef::Boxed(b) => b.units_in_hand().unwrap_or(b.value()),
        other => other.value(),
    }
}

/// CTR.GET key: the value, or a spread counter's total.
pub fn get(ctx: Ctx, key: RawString) -> CommandResult {
    let own_units_only = reads_own_units_only(string_bytes(key));
    if cluster::reading_a_holder() && super::ctr_store::holds_stray(ctx, key) {
        return Ok(Reply::Integer(0)); // not the holder: counted as a missing one (`strays`)
    }
    let r = with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b))
            if !own_units_only && (b.spread().is_some() || !b.leaving().is_empty()) =>
        {
            None
        }
        other => Some(other.map_or(0, held)),
    })?;
    match r {
        Some(value) => Ok(Reply::Integer(value)),
        None => gather(ctx, vec![reading(ctx, key)?], Finish::Get),
    }
}

/// CTR.MGET key...: each value, or each spread counter's total.
pub fn mget(ctx: Ctx, args: &Args) -> CommandResult {
    let readings = (1..args.len())
        .map(|i| reading(ctx, args.raw(i)))
        .collect::<Result<Vec<_>, _>>()?;
    if readings.iter().all(|r| r.holders.is_empty()) {
        let values = readings.iter().map(|r| total(r).map(Reply::Integer));
        return Ok(Reply::Array(values.collect::<Result<_, _>>()?));
    }
    gather(ctx, readings, Finish::MGet)
}

/// CTR.CLEAR or CTR.RECONCILE of a spread home (a home with holders, current or leaving):
/// gathers the holders afresh (never from the cache, never sharing another read's gather),
/// then writes the total in one step on this master (`apply`). A failed gather fails the
/// write and changes nothing.
pub fn write_total(
    ctx: Ctx,
    key: RawString,
    write: TotalWrite,
    apply: ApplyTotal,
) -> CommandResult {
    let r = reading(ctx, key)?;
    let home = r.home.clone();
    let reply = gather(ctx, vec![r], Finish::Clear(write, apply));
    if reply.is_ok() {
        forget_cached(&home);
    }
    reply
}

/// CTR.INFO key: `fields` as built for the key itself; a home's gains its total and holders.
pub fn info(ctx: Ctx, key: RawString, reply: Reply) -> CommandResult {
    let Reply::Map(fields) = reply else {
        return Ok(reply);
    };
    let r = reading(ctx, key)?;
    if r.holders.is_empty() {
        return Ok(Reply::Map(fields));
    }
    let view = bounded_view(ctx, key, &r)?;
    gather(ctx, vec![r], Finish::Info(fields, view))
}

/// The bound fields of CTR.INFO of a bounded spread home (floored, ceiled or both), for the
/// holders `r` reads.
fn bounded_view(
    ctx: Ctx,
    key: RawString,
    r: &Reading,
) -> Result<Option<BoundedView>, CommandError> {
    let (floor, ceiling) = with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => b.spread().map_or((None, None), |s| (s.floor, s.ceiling)),
        _ => (None, None),
    })?;
    Ok(bounded::bounded_view(ctx, key, floor, ceiling, &r.holders))
}

fn finish(ctx: Ctx, readings: &[Reading], how: Finish) -> CommandResult {
    match how {
        Finish::Clear(write, apply) => {
            let r = &readings[0];
            // Every holder answered (a gather completes only then): never a partial sum.
            let gathered = r
                .holders
                .iter()
                .zip(r.values.get(1..).unwrap_or_default())
                .map(|(name, v)| v.map(|v| (name.as_slice(), v)))
                .collect::<Option<Vec<_>>>()
                .filter(|g| g.len() == r.holders.len())
                .ok_or(CommandError::fixed(
                    "ERR spread counter total unavailable: a holder was not read",
                ))?;
            apply(ctx, &r.home, gathered, write)
        }
        Finish::Get => Ok(Reply::Integer(total(&readings[0])?)),
        Finish::MGet => Ok(Reply::Array(
            readings
                .iter()
                .map(|r| total(r).map(Reply::Integer))
                .collect::<Result<_, _>>()?,
        )),
        Finish::Info(mut fields, view) => {
            let r = &readings[0];
            let total = total(r)?;
            // A bounded counter shrunk to one key, its folds under way: its floor (ceiling) is
            // the home's own plus what its leaving holders hold (each sealed holder's share is
            // in hand until the home has it), not the home's part alone.
            let folding = view.is_none() && r.current == 0;
            let folding_floor = folding.then(|| bounded::folding_bound(&r.floors)).flatten();
            let folding_ceiling = folding
                .then(|| bounded::folding_bound(&r.ceilings))
                .flatten();
            if let Some(mut view) = view {
                let values: Vec<i64> = r.values.iter().map(|v| v.unwrap_or(0)).collect();
                view.read(&r.floors, &r.ceilings);
                bounded::info_fields(&mut fields, total, &values, &view);
            }
            for (name, value) in fields.iter_mut() {
                match (*name, folding_floor, folding_ceiling) {
                    ("value", _, _) => *value = Reply::Integer(total),
                    ("floor", Some(floor), _) => *value = Reply::Integer(floor),
                    ("ceiling", _, Some(ceiling)) => *value = Reply::Integer(ceiling),
                    _ => {}
                }
            }
            let (current, leaving) = r.holders.split_at(r.current);
            fields.push(("holders", names_reply(&r.home, current.iter())));
            let leaving = leaving.iter().map(|n| Reply::Bulk(n.clone()));
            fields.push(("leaving", Reply::Array(leaving.collect())));
            let values = r.values.iter().map(|v| Reply::Integer(v.unwrap_or(0)));
            fields.push(("holder_values", Reply::Array(values.collect())));
            let ages = r.ages.iter().copied().map(Reply::Integer);
            fields.push(("holder_ages_ms", Reply::Array(ages.collect())));
            Ok(Reply::Map(fields))
        }
    }
}

thread_local! {
    static GATHERS: RefCell<Node> = RefCell::new(GatherNode::new(random_id));
    static CACHE: RefCell<HashMap<Vec<u8>, Gathered>> = RefCell::new(HashMap::new());
    /// Bytes of the holder names the cache keeps (bounded by CACHE_NAME_BYTES).
    static CACHE_BYTES: Cell<usize> = const { Cell::new(0) };
}

/// A home key's holder values as last gathered, with the holder names they were read from.
struct Gathered {
    at: i64,
    /// The holders read (current ones, then leaving ones), holder 0 implicit.
    holders: Rc<Vec<Vec<u8>>>,
    /// Value by holder index, holder 0 first.
    values: Vec<Option<i64>>,
}

impl Gathered {
    /// True when these values may stand for a read of `holders` (of which the first `current`
    /// are current) at `now`: no older than `cache_ms`, no holder folding back, and gathered
    /// from exactly these holder names. Names are never reused (a spread made again has a new
    /// id, growing skips folded names), so a holder list changed in any way since (a fold, a
    /// shrink and a growth back to the same count, the spread deleted and made again) never
    /// reuses a value. A replica needs this: it learns of such changes only as replicated
    /// states, and keeps its own cache.
    fn serves(&self, holders: &[Vec<u8>], current: usize, now: i64, cache_ms: i64) -> bool {
        now.saturating_sub(self.at) <= cache_ms
            && current == holders.len()
            && *self.holders == holders
            && self.values.len() == holders.len() + 1
    }

    fn name_bytes(&self) -> usize {
        self.holders.iter().map(Vec::len).sum()
    }
}

/// Bound on cached totals; past it the cache starts over.
const CACHE_LIMIT: usize = 10_000;
/// Bound on the bytes of holder names cached; past it the cache starts over.
const CACHE_NAME_BYTES: usize = 64 << 20;

pub(crate) fn forget_cached(home: &[u8]) {
    let gone = CACHE.with(|c| c.borrow_mut().remove(home));
    if let Some(g) = gone {
        CACHE_BYTES.with(|b| b.set(b.get().saturating_sub(g.name_bytes())));
    }
}

/// A read's total, or the overflow error.
fn total(r: &Reading) -> Result<i64, CommandError> {
    r.total().ok_or(OVERFLOW)
}

/// A request id's random start (see `protocol::exchange`).
fn random_id() -> u64 {
    u64::from_le_bytes(crate::ffi::random_bytes())
}

/// A round's failure as the reply its reads get. A holder that was not where the slot map
/// said makes the map be read again at the next use.
impl From<GatherFailure> for CommandError {
    fn from(failure: GatherFailure) -> CommandError {
        let text = match failure {
            GatherFailure::Moving(name) => {
                cluster::forget_topology();
                format!(
                    "TRYAGAIN spread counter holder '{}' is moving between masters",
                    String::from_utf8_lossy(&name)
                )
            }
            GatherFailure::Failed(name, text) => format!(
                "ERR spread counter holder '{}': {text}",
                String::from_utf8_lossy(&name)
            ),
            GatherFailure::Unserved(slot) => {
                format!("CLUSTERDOWN spread counter holder slot {slot} is not served")
            }
        };
        CommandError(text.into())
    }
}

/// Runs the gather node over this server, then caches the rounds it settled and carries out
/// their effects with the node no longer borrowed.
fn with_node<R: Default>(
    ctx: *mut raw::RedisModuleCtx,
    f: impl FnOnce(&mut Node, &mut RedisHost, &mut Vec<Effect>) -> R,
) -> R {
    let c = Ctx { ptr: ctx };
    let mut effects = Vec::new();
    let (r, settled) = run_machine(c, &GATHERS, "the gather", |node, host| {
        let r = f(node, host, &mut effects);
        (r, node.take_settled())
    });
    let now = c.now_ms();
    for round in &settled {
        remember(round, now);
    }
    run(ctx, effects);
    r
}

/// Fills what can be had without waiting: outside a cluster every holder, read at once; in a
/// cluster the cached values (only when `use_cache`). Returns the readings that need a gather.
fn fill_at_once(
    ctx: Ctx,
    readings: &mut [Reading],
    use_cache: bool,
    in_cluster: bool,
) -> Result<Vec<usize>, CommandError> {
    let cache_ms = config::GATHER_CACHE_MS.load(Relaxed);
    let now = ctx.now_ms();
    let mut waiting = Vec::new();
    for (i, reading) in readings.iter_mut().enumerate() {
        if reading.holders.is_empty() {
            continue;
        }
        if !in_cluster {
            let holders = reading.holders.clone();
            for name in holders.iter() {
                let read = read_of(name, cluster::read_holder(ctx.ptr, name))?;
                reading.values.push(Some(read.value));
                reading.floors.push(read.floor);
                reading.ceilings.push(read.ceiling);
                reading.ages.push(0);
            }
            continue;
        }
        let cached = if use_cache && cache_ms > 0 {
            CACHE.with(|c| {
                c.borrow()
                    .get(&reading.home)
                    .filter(|g| g.serves(&reading.holders, reading.current, now, cache_ms))
                    .map(|g| (now.saturating_sub(g.at), g.values.clone()))
            })
        } else {
            None
        };
        match cached {
            Some((age, values)) => {
                let n = reading.holders.len();
                reading.values.extend_from_slice(&values[1..]);
                reading.floors.resize(n + 1, None);
                reading.ceilings.resize(n + 1, None);
                reading.ages.resize(n + 1, age);
            }
            None => waiting.push(i),
        }
    }
    Ok(waiting)
}

/// What a read has once it asked for its values: all of them, or a blocked client.
enum Waited {
    Ready(Vec<Reading>, Finish),
    Blocked,
}

/// Takes what it can from the cache and, outside a cluster, reads every holder at once; in a
/// cluster it blocks the client until the gathers it waits for (shared with other reads of the
/// same homes) have answered.
fn gather(ctx: Ctx, readings: Vec<Reading>, how: Finish) -> CommandResult {
    metrics::GATHERS.incr();
    // The home's slot is being handed over to another master (atomic slot migration): the
    // home here may no longer be the counter's. The read waits for the handoff's end.
    if let Some(home) = handing_off_home(&readings) {
        let parked = match how {
            Finish::Clear(..) => None, // a write never runs while writes are paused
            _ => read_handoff::park_bound(ctx),
        };
        let Some(bound) = parked else {
            metrics::GATHER_FAILURES.incr();
            return Err(read_handoff::moving_error(&home));
        };
        park(ctx, readings, how, &home, bound);
        return Ok(Reply::Blocked);
    }
    match wait_for_gathers(ctx, readings, how, None) {
        Ok(Waited::Blocked) => Ok(Reply::Blocked),
        Ok(Waited::Ready(readings, how)) => {
            metrics::record_gather_latency(0);
            finish(ctx, &readings, how)
        }
        Err(e) => {
            metrics::GATHER_FAILURES.incr();
            Err(e)
        }
    }
}

/// The first home of `readings` (one with holders) whose slot is being handed over.
fn handing_off_home(readings: &[Reading]) -> Option<Vec<u8>> {
    let r = readings
        .iter()
        .find(|r| !r.holders.is_empty() && super::slot_migration::handing_off(&r.home))?;
    Some(r.home.clone())
}

/// Blocks the read's client and parks it until the handoff of `home`'s slot ends
/// (`read_handoff`). The server's timeout covers the wait and the gather after it.
fn park(ctx: Ctx, readings: Vec<Reading>, how: Finish, home: &[u8], bound: i64) {
    let timeout = bound.saturating_add(config::GATHER_TIMEOUT_MS.load(Relaxed));
    let now = ctx.now_ms();
    let blocked = Blocked {
        bc: waiter::block_until_answered(ctx, timeout, &HOOKS),
        started_ms: now,
    };
    // SAFETY: ctx is live.
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) };
    let keys = readings.into_iter().map(|r| r.home).collect();
    let wait = read_handoff::Wait {
        home: home.to_vec(),
        retry_at_ms: now,
        deadline_ms: now.saturating_add(bound),
    };
    park_blocked(ctx, blocked, Ending { how, db }, keys, wait);
}

/// Parks the read of the client `blocked`, with its `keys`, until `wait` lets it gather again.
fn park_blocked(
    ctx: Ctx,
    blocked: Blocked,
    ending: Ending,
    keys: Vec<Vec<u8>>,
    wait: read_handoff::Wait,
) {
    let resume = move |ctx: Ctx, outcome: Outcome| {
        let result = match outcome {
            Outcome::Served => gather_again(ctx, blocked, ending, &keys),
            Outcome::Refused(e) => Err(e),
        };
        if let Some(result) = result.transpose() {
            unblock(blocked.bc, result);
        }
    };
    read_handoff::park(ctx, blocked.bc, wait, Box::new(resume));
}

/// A parked read whose wait ended with its home's slot served here: its keys are read afresh
/// (the home may have changed since the read arrived) and gathered for its client, blocked
/// already. Ok(None) when it waits for a gather (which unblocks it).
fn gather_again(
    ctx: Ctx,
    blocked: Blocked,
    ending: Ending,
    keys: &[Vec<u8>],
) -> Result<Option<Reply>, CommandError> {
    select_db(ctx, ending.db); // the one the client had selected
    let names: Vec<KeyName> = keys.iter().map(|k| KeyName::new(ctx, k)).collect();
    let readings = names
        .iter()
        .map(|k| reading(ctx, k.raw))
        .collect::<Result<Vec<_>, _>>()?;
    let how = match ending.how {
        Finish::Info(fields, _) => {
            Finish::Info(fields, bounded_view(ctx, names[0].raw, &readings[0])?)
        }
        other => other,
    };
    match wait_for_gathers(ctx, readings, how, Some(blocked))? {
        Waited::Blocked => Ok(None),
        Waited::Ready(readings, how) => finish(ctx, &readings, how).map(Some),
    }
}

/// How long after a holder answered "moving" its read gathers again.
const GATHER_AGAIN_MS: i64 = 20;

/// A read (or a clear, a reconcile) whose gather failed: a holder whose slot is being handed
/// over between two other masters (its `TRYAGAIN`) makes it gather again [`GATHER_AGAIN_MS`]
/// later, within `ctr.purchase-wait-ms` of its arrival (`read_handoff`); any other failure, or
/// past that bound, replies the error.
fn gather_again_or_fail(ctx: Ctx, reader: Reader, e: CommandError) {
    let bc = reader.bc;
    let now = ctx.now_ms();
    let deadline = reader
        .started_ms
        .saturating_add(config::PURCHASE_WAIT_MS.load(Relaxed));
    let retry_at = now.saturating_add(GATHER_AGAIN_MS);
    // A clear or reconcile gathers again too: it writes only once every holder answered.
    let again = e.0.starts_with("TRYAGAIN") && retry_at < deadline && read_handoff::has_room();
    let Some(home) = reader
        .readings
        .first()
        .map(|r| r.home.clone())
        .filter(|_| again)
    else {
        unblock(bc, Err(e));
        return;
    };
    metrics::GATHER_RETRIES.incr();
    let blocked = Blocked {
        bc,
        started_ms: reader.started_ms,
    };
    let keys = reader.readings.into_iter().map(|r| r.home).collect();
    let wait = read_handoff::Wait {
        home,
        retry_at_ms: retry_at,
        deadline_ms: deadline,
    };
    park_blocked(ctx, blocked, reader.finish, keys, wait);
}

/// Fills the readings and, where holders are elsewhere, blocks the client (or uses `blocked`,
/// a client blocked already, for a parked read) until the gathers it waits for answered.
fn wait_for_gathers(
    ctx: Ctx,
    mut readings: Vec<Reading>,
    how: Finish,
    blocked: Option<Blocked>,
) -> Result<Waited, CommandError> {
    let clearing = matches!(how, Finish::Clear(..));
    let in_cluster = cluster::in_cluster(ctx);
    if in_cluster {
        cluster::topology(ctx, false)?; // a slot map that cannot be read fails the read here
    }
    let waiting = fill_at_once(ctx, &mut readings, !clearing, in_cluster)?;
    if !in_cluster || waiting.is_empty() {
        return Ok(Waited::Ready(readings, how));
    }
    if blocked.is_none() && !ctx.can_block() {
        return Err(if clearing {
            CANNOT_BLOCK_CLEAR
        } else {
            CANNOT_BLOCK
        });
    }
    // SAFETY: ctx is live.
    let db = unsafe { rm!(RedisModule_GetSelectedDb)(ctx.ptr) };
    // Which readings start a gather now (no gather of their home in flight), planned before
    // blocking so that a slot map error fails the read right here; and the bounds.
    let mut plans: HashMap<usize, Plan<NodeId>> = HashMap::new();
    let mut new_bytes = 0usize;
    let mut host = RedisHost::new(ctx);
    let (reads, held_bytes) = GATHERS.with(|g| {
        let g = g.borrow();
        let g = &g.table;
        for &i in &waiting {
            let r = &readings[i];
            let home = if clearing { None } else { g.home_rounds(db, r) };
            if home.is_none_or(|h| h.next.is_none()) {
                new_bytes = new_bytes.saturating_add(r.holders.iter().map(Vec::len).sum());
            }
            if home.is_none_or(|h| h.in_flight.is_none()) {
                plans.insert(i, Node::plan(&mut host, &r.holders)?);
            }
        }
        Ok::<_, CommandError>((g.readers.len(), g.name_bytes))
    })?;
    if reads >= MAX_WAITING_READS {
        return Err(TOO_MANY_READS);
    }
    if new_bytes > 0 && held_bytes.saturating_add(new_bytes) > MAX_GATHER_NAME_BYTES {
        return Err(TOO_MANY_NAMES);
    }
    let (bc, started_ms, within) = match blocked {
        Some(b) => (b.bc, b.started_ms, Within::Callback),
        None => {
            let timeout = config::GATHER_TIMEOUT_MS.load(Relaxed);
            let bc = waiter::block_until_answered(ctx, timeout, &HOOKS);
            (bc, ctx.now_ms(), Within::Command)
        }
    };
    let started = GATHERS.with(|g| {
        let mut g = g.borrow_mut();
        let g = &mut g.table;
        let mut started = Vec::new();
        let mut waits = Vec::new();
        for &i in &waiting {
            let reading = &mut readings[i];
            let joined = if clearing {
                None
            } else {
                g.join(db, reading, &started)
            };
            let id = match (joined, plans.remove(&i)) {
                (Some(id), _) => id,
                (None, Some(plan)) => {
                    // Nothing of this home in flight: a gather starts now.
                    let id = g.new_round(db, reading, !clearing);
                    g.plan(id, plan);
                    started.push(id);
                    if !clearing {
                        g.list(db, reading, id, true);
                    }
                    id
                }
                (None, None) => {
                    // One in flight, none queued yet: queue one behind it.
                    let id = g.new_round(db, reading, true);
                    g.list(db, reading, id, false);
                    id
                }
            };
            if let Some(round) = g.rounds.get_mut(id) {
                round.waiters.push(bc);
            }
            waits.push((i, id));
        }
        let reader = Reader {
            bc,
            started_ms,
            readings,
            waits,
            finish: Ending { how, db },
        };
        g.readers.insert(bc, reader);
        started
    });
    for id in started {
        launch(ctx.ptr, id, within);
    }
    Ok(Waited::Blocked)
}

/// Where a round is launched from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Within {
    /// A command (the read that starts the round).
    Command,
    /// A callback outside any command (a timer, a bus message, a read link's delivery).
    Callback,
}

/// Sends a started round's requests, arms its resend tick and reads the holders this node
/// serves: from a timer run at once (`scheduler::When::Now`) when launched by a command (not inside
/// it: see `Round::locals`), directly from a callback (no timer on the way of a queued round).
fn launch(ctx: *mut raw::RedisModuleCtx, id: u64, within: Within) {
    if !with_node(ctx, |node, host, _| node.launch(host, id)) {
        return;
    }
    arm_resend_tick(ctx);
    match within {
        Within::Command => scheduler::arm(ctx, When::Now, &LOCAL_READS, id as usize),
        Within::Callback => read_locals(ctx, id),
    }
}

/// What a read link delivers: an answer (recorded exactly as one from the bus), or a request
/// its link lost, sent over the bus now.
fn on_link_delivery(ctx: Ctx, delivery: read_links::Delivery) {
    match delivery {
        read_links::Delivery::Answer(node, bytes) => record_gather_answers(ctx, node, &bytes),
        read_links::Delivery::Lost(node, rid) => {
            with_node(ctx.ptr, |n, host, _| n.resend_lost(host, &node, rid))
        }
    }
}

/// Resends what is unanswered of every round due a resend; armed while rounds are pending
/// (a contained panic does not stop resends).
static RESEND: Job = Job::while_busy(
    "gather-resend",
    |ctx| with_node(ctx.ptr, |node, host, _| node.resend_due(host)),
    || GATHERS.with(|g| g.try_borrow().is_ok_and(|g| !g.table.rounds.is_empty())),
    RESEND_TICK_MS,
);

fn arm_resend_tick(ctx: *mut raw::RedisModuleCtx) {
    scheduler::arm_once(ctx, When::After(RESEND_TICK_MS), &RESEND);
}

/// Reads the holders this node serves, from a timer (outside any command, so each key is
/// looked up in its own slot), then completes the round if the other masters have answered.
static LOCAL_READS: Job = Job::once("gather-local-reads", |ctx, id| {
    read_locals(ctx.ptr, id as u64)
});

fn read_locals(ctx: *mut raw::RedisModuleCtx, id: u64) {
    with_node(ctx, |node, host, effects| {
        node.read_locals(host, id, effects)
    });
}

/// Starts a queued round whose turn came in a callback that should not start it itself (a
/// timed-out or disconnected client's), from a timer.
static START: Job = Job::once("gather-start", |ctx, id| {
    run(ctx.ptr, vec![Effect::Start(id as u64)])
});

/// Carries out what settling rounds left to do, with the node not borrowed: starts queued
/// rounds (which may fail at once and settle in turn), and replies to the reads that are done.
fn run(ctx: *mut raw::RedisModuleCtx, mut effects: Vec<Effect>) {
    while let Some(effect) = effects.pop() {
        match effect {
            Effect::Start(id) => {
                if with_node(ctx, |node, host, effects| node.start(host, id, effects)) {
                    launch(ctx, id, Within::Callback);
                }
            }
            Effect::Done(mut reader) => {
                let c = Ctx { ptr: ctx };
                if let Err(e) = sum_time_view(c, &mut reader.readings, reader.started_ms) {
                    // The home's slot left this node meanwhile: redirected once its handoff
                    // ends, never summed from the home as it was (`read_handoff`).
                    gather_again_or_fail(c, reader, e);
                    continue;
                }
                metrics::record_gather_latency(c.now_ms().saturating_sub(reader.started_ms));
                let result = finish(c, &reader.readings, reader.finish.how);
                unblock(reader.bc, result);
            }
            Effect::Fail(reader, e) => gather_again_or_fail(Ctx { ptr: ctx }, reader, e),
        }
    }
}

fn unblock(bc: Answered, result: CommandResult) {
    if result.is_err() {
        metrics::GATHER_FAILURES.incr();
    }
    waiter::answer(bc, result);
}

/// The gather's bus messages: a request (answered for each holder this node serves) and a
/// response (recorded; once every master has answered, the reads waiting are unblocked).
pub(crate) fn receive(ctx: Ctx, from: NodeId, kind: MessageKind, payload: &[u8]) {
    match kind {
        MSG_GATHER_REQUEST => answer_gather(ctx, from, payload),
        MSG_GATHER_RESPONSE => record_gather_answers(ctx, from, payload),
        _ => {}
    }
}

fn answer_gather(ctx: Ctx, from: cluster::NodeId, bytes: &[u8]) {
    let Some(response) = answer_request(ctx, bytes, Caller::Module) else {
        return; // malformed: the asker times out
    };
    cluster::send(ctx.ptr, &from, MSG_GATHER_RESPONSE, &response);
}

/// The response to a gather request's bytes (None: malformed), each holder read with the
/// rights of `caller`: a bus request's (the module's), or `CTR.GATHER`'s calling client's.
pub fn answer_request(ctx: Ctx, bytes: &[u8], caller: Caller) -> Option<Vec<u8>> {
    let (id, names) = gather_msg::decode_request(bytes).ok()?;
    let answers = gather_node::answer(&mut RedisHost::reading_as(ctx, caller), &names);
    Some(gather_msg::encode_response(id, &answers))
}

fn record_gather_answers(ctx: Ctx, from: cluster::NodeId, bytes: &[u8]) {
    let Ok((rid, answers)) = gather_msg::decode_response(bytes) else {
        return;
    };
    with_node(ctx.ptr, |node, host, effects| {
        node.on_response(host, &from, rid, answers, effects)
    });
}

/// Takes each home's own state as it is now, when the total is summed (the holders were read
/// earlier, one by one): its value, and which holders still count. A holder that is neither a
/// current holder nor still leaving has been folded back since it answered: its units are in
/// the home's value now, so its answer counts 0. A leaving holder still listed has not had its
/// credit applied (the credit removes it from `leaving` in the same write that adds its units
/// to the home), so its answer, which includes whatever it sent, is counted once. Both facts
/// come from one read of the home on this thread, between two writes: every unit is counted
/// exactly once at every step of a fold.
///
/// The home must still be this node's then: a home whose slot was handed over to another
/// master since the read arrived (an atomic slot migration, `started_ms`) is the new master's,
/// where folds and moves may have changed it since; its copy here (trimmed, or not yet on
/// Redis) is not the counter's. The read then fails with `TRYAGAIN`, and is redirected once
/// the handoff ended (`read_handoff`). The simulator found it: such a read summed the home as
/// read at its start with holders read after a fold landed, 33 units short (seed 2514).
fn sum_time_view(ctx: Ctx, readings: &mut [Reading], started_ms: i64) -> Result<(), CommandError> {
    use super::slot_migration::{exported_since, handing_off};
    for r in readings.iter_mut().filter(|r| !r.holders.is_empty()) {
        if handing_off(&r.home) || exported_since(&r.home, started_ms) {
            return Err(read_handoff::moving_error(&r.home));
        }
        let home = KeyName::new(ctx, &r.home);
        let now = with_counter(ctx, home.raw, |c| {
            c.map(|c| {
                let bounds = (value_and_floor(Some(c)).1, own_ceiling(Some(c)));
                (held(c), bounds, unlisted(c, &r.holders))
            })
        });
        let Ok(Some((value, (floor, ceiling), gone))) = now else {
            continue; // the home is gone (a DEL) or changed type: keep what was read
        };
        r.values[0] = Some(value);
        r.floors[0] = floor;
        r.ceilings[0] = ceiling;
        for i in gone {
            if let (Some(v), Some(f), Some(x)) = (
                r.values.get_mut(i + 1),
                r.floors.get_mut(i + 1),
                r.ceilings.get_mut(i + 1),
            ) {
                *v = Some(0);
                *f = None;
                *x = None;
            }
        }
    }
    Ok(())
}

/// Caches a round's holder values (only when a cache is configured, and for unbounded
/// holders: floored or ceiled holders are read afresh every time, the cache keeps values, not
/// bounds).
fn remember(round: &Round<NodeId>, now: i64) {
    let bounded = |b: &[Option<i64>]| b.iter().any(Option::is_some);
    if config::GATHER_CACHE_MS.load(Relaxed) == 0
        || bounded(&round.floors)
        || bounded(&round.ceilings)
    {
        return;
    }
    CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if cache.len() >= CACHE_LIMIT || CACHE_BYTES.with(Cell::get) >= CACHE_NAME_BYTES {
            cache.clear();
            CACHE_BYTES.with(|b| b.set(0));
        }
        let mut values = Vec::with_capacity(round.values.len() + 1);
        values.push(None);
        values.extend_from_slice(&round.values);
        let entry = Gathered {
            at: now,
            holders: round.holders.clone(),
            values,
        };
        let added = entry.name_bytes();
        let replaced = cache
            .insert(round.home.clone(), entry)
            .map_or(0, |g| g.name_bytes());
        CACHE_BYTES.with(|b| b.set(b.get().saturating_add(added).saturating_sub(replaced)));
    });
}

/// The gather's part in its blocked reads' waits (`waiter`).
static HOOKS: waiter::AnswerHooks = waiter::AnswerHooks {
    timed_out,
    gone,
    callbacks: [
        "gather-reply",
        "gather-timeout",
        "gather-disconnect",
        "gather-free",
    ],
};

/// Removes a blocked read (timed out or gone) from the gathers it waits for; a gather no read
/// waits for any more is dropped, and the home's queued gather, if any, starts from a timer.
/// Returns how many masters had not answered what it waited for (None: no such read).
fn drop_reader(ctx: *mut raw::RedisModuleCtx, bc: Answered) -> Option<usize> {
    let mut effects = Vec::new();
    let silent = GATHERS.with(|g| {
        let mut g = g.borrow_mut();
        let g = &mut g.table;
        let silent = g.silent_for(g.readers.get(&bc)?);
        g.remove_reader(bc, &mut effects);
        Some(silent)
    });
    for effect in effects {
        if let Effect::Start(id) = effect {
            scheduler::arm(ctx, When::After(0), &START, id as usize);
        }
    }
    silent
}

/// A blocked read past `ctr.gather-timeout-ms` (with its handoff's bound when parked): it
/// leaves its gathers and gets the error.
fn timed_out(ctx: *mut raw::RedisModuleCtx, bc: Answered) -> CommandError {
    let parked = read_handoff::unpark(bc);
    let silent = drop_reader(ctx, bc).unwrap_or(0);
    metrics::GATHER_FAILURES.incr();
    metrics::GATHER_TIMEOUTS.incr();
    if parked {
        // Only a server that lets the timer lag past the wait's bound gets here.
        CommandError::fixed("TRYAGAIN spread counter is moving between masters")
    } else {
        CommandError(
            format!(
                "ERR spread counter total unavailable: {silent} master(s) did not answer within ctr.gather-timeout-ms"
            )
            .into(),
        )
    }
}

/// A blocked read whose client went away leaves its handoff's wait and its gathers.
fn gone(ctx: *mut raw::RedisModuleCtx, bc: Answered) {
    read_handoff::unpark(bc);
    drop_reader(ctx, bc);
}

/// Registers the bus receivers (harmless outside a cluster).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    read_links::register(ctx, on_link_delivery);
}
