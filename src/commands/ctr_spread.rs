//! Spread counters: CTR.SPREAD, and the gathered reads of a home key (CTR.GET, CTR.MGET and
//! CTR.INFO give the total over every holder).
//!
//! Outside a cluster a gather reads every holder at once. In a cluster it blocks the client,
//! asks each other master for its holders over the cluster bus (one request per master, with a
//! request id, resent until answered), reads the holders this node serves from a timer (see
//! [`Plan`]), all through `RM_Call`, which checks slot ownership, and replies once everything
//! is in; after `ctr.gather-timeout-ms` the read fails, it never returns a partial sum. A holder
//! that a master no longer serves (resharded, migrating) fails the read with TRYAGAIN. Where a
//! client cannot block (MULTI/EXEC, scripts), a read in a cluster whose holders are not in the
//! cache (`ctr.gather-cache-ms`) fails with a clear error.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::Relaxed;

use redis_module::raw;

use super::ctr_floor_spread::{self as floored, FlooredView};
use super::ctr_store::{publish_state, update_counter, value_and_floor, with_counter};
use super::parse::integer;
use super::spread_cluster::{self as cluster, NodeId};
use crate::config;
use crate::counter::spread::{
    carried_home, key_slot, parse_holder_name, plan_holders_avoiding, spread_id_from, PlanError,
    SlotOwners, Standalone, MAX_HOLDERS, MAX_HOME_NAME,
};
use crate::counter::{exact_sum, CounterRef, Spread, TokenStamp};
use crate::ffi::{
    rm, string_bytes, Args, CommandError, CommandResult, Ctx, Key, KeyName, RawString, Reply,
};
use crate::metrics;
use crate::persist::ctr_format;
use crate::persist::gather_msg::{self, HolderAnswer};

/// Bus message types (0-254): a gather request and its response.
const MSG_GATHER_REQUEST: u8 = 0xC7;
const MSG_GATHER_RESPONSE: u8 = 0xC8;

const CANNOT_BLOCK: CommandError = CommandError::fixed(
    "ERR spread counter total needs a gather from other masters, which cannot wait inside MULTI/EXEC or a script (read it outside, or set ctr.gather-cache-ms)",
);
/// The same wait refused for a clear of a spread counter's total (which never uses the cache:
/// it must clear every add completed before it).
const CANNOT_BLOCK_CLEAR: CommandError = CommandError::fixed(
    "ERR spread counter total needs a gather from other masters, which cannot wait inside MULTI/EXEC or a script (clear it outside)",
);
const OVERFLOW: CommandError = CommandError::fixed("ERR counter overflow");

/// Refuses a command that acts on a whole counter (CTR.SPREAD, CTR.FLOOR, CTR.CLEAR) when
/// `key` is named as a holder: a holder is never a home, and acting on it alone would change
/// one part of another counter. A replayed command (from the master or the AOF) applies what
/// it says: it was decided where it was first run.
pub fn refuse_holder(ctx: Ctx, key: &[u8]) -> Result<(), CommandError> {
    match parse_holder_name(key) {
        None => Ok(()),
        Some(_) if ctx.is_replaying() => Ok(()),
        Some(holder) => Err(CommandError(
            format!(
                "ERR {} is a holder of the spread counter {}: use the home key",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(holder.home)
            )
            .into(),
        )),
    }
}

/// True when a read of `key` gives its own units only: a key named as a holder never gathers
/// (whatever holder list it carries, say after a home was renamed onto a holder's name), nor
/// does any read made while gathering, so no read ever recurses into a holder's holders.
fn reads_own_units_only(key: &[u8]) -> bool {
    parse_holder_name(key).is_some() || cluster::reading_a_holder()
}

/// CTR.SPREAD key holders
pub fn spread(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(super::wrong_arity("ctr.spread"));
    }
    refuse_holder(ctx, args.bytes(1))?;
    let target = integer(args.bytes(2))?;
    let target = usize::try_from(target)
        .ok()
        .filter(|n| (1..=MAX_HOLDERS).contains(n))
        .ok_or(CommandError::fixed(
            "ERR holders must be between 1 and 1024",
        ))?;
    let home = args.bytes(1);
    super::ctr_store::refuse_unwritable(ctx, args.raw(1))?;
    let (current, spread_id) = with_counter(ctx, args.raw(1), current_spread)?;
    if target < current.len() + 1 {
        // The reply comes at once; the removed holders fold back in the background (CTR.INFO
        // lists them under `leaving` until then), and reads stay exact meanwhile.
        let kept = super::spread_transfer::begin_fold(ctx, args.raw(1), target)?;
        forget_cached(home);
        return Ok(names_reply(home, kept.iter()));
    }
    if target > current.len() + 1 {
        let all = grow(ctx, args.raw(1), spread_id, &current, target)?;
        return Ok(names_reply(home, all.iter()));
    }
    Ok(names_reply(home, current.iter()))
}

/// The holders of the counter and its spread's id; for a counter not spread, no holders and
/// None (its spread, if it spreads, gets a new id).
fn current_spread(c: Option<CounterRef>) -> (Vec<Vec<u8>>, Option<u64>) {
    match c {
        Some(CounterRef::Boxed(b)) => b
            .spread()
            .map_or((Vec::new(), None), |s| (s.holders.clone(), Some(s.id))),
        _ => (Vec::new(), None),
    }
}

/// Adds holders to reach `target` (more than `current` has), records them and replicates the
/// resulting state; returns every holder's name but the home's. A counter spreading afresh
/// (`spread_id` None) gets a random id here, on the master; replicas and the AOF get it with
/// the state.
fn grow(
    ctx: Ctx,
    key_name: RawString,
    spread_id: Option<u64>,
    current: &[Vec<u8>],
    target: usize,
) -> Result<Vec<Vec<u8>>, CommandError> {
    let home = string_bytes(key_name);
    if home.len() > MAX_HOME_NAME {
        return Err(CommandError::fixed(
            "ERR key name too long to spread (at most 1024 bytes)",
        ));
    }
    let in_cluster = cluster::in_cluster(ctx);
    let is_floored = super::ctr_store::floor_of(ctx, key_name)?.is_some();
    // A floored counter's spread id is odd, an unfloored one's even: a holder's name alone
    // then keeps it at or above 0 until its first budget credit gives it a floor.
    let spread_id =
        spread_id.unwrap_or_else(|| spread_id_from(crate::ffi::random_bytes(), is_floored));
    let folded: Vec<Vec<u8>> = with_counter(ctx, key_name, |c| match c {
        Some(CounterRef::Boxed(b)) => b.transfers().map_or_else(Vec::new, |t| {
            let givers = t.inbox.iter().map(|e| e.name.clone());
            givers
                .chain(t.leaving.iter().map(|l| l.name.clone()))
                .collect()
        }),
        _ => Vec::new(),
    })?;
    let taken = |name: &[u8]| folded.iter().any(|f| f == name);
    // New holders carry the home name the others carry (a home renamed since keeps it).
    let carried = carried_home(current.iter().map(Vec::as_slice)).unwrap_or(home);
    let added = if in_cluster {
        plan(
            carried,
            spread_id,
            current,
            target,
            &*cluster::topology(ctx, true)?,
            &taken,
        )
    } else {
        plan(carried, spread_id, current, target, &Standalone, &taken)
    }?;
    if is_floored && in_cluster {
        floored::spread_floored_across_masters(ctx, key_name, spread_id, current, &added)?;
    } else if is_floored {
        floored::spread_floored(ctx, key_name, spread_id, current, &added)?;
    } else {
        let key = Key::open(ctx, key_name, true);
        let state = update_counter(&key, |c, _| {
            c.set_spread(Spread {
                id: spread_id,
                holders: current.iter().chain(&added).cloned().collect(),
                floor: None,
            })?;
            Ok(ctr_format::encode(c))
        })?;
        drop(key);
        publish_state(ctx, key_name, &state)?;
    }
    metrics::SPREADS.incr();
    forget_cached(home);
    Ok(current.iter().chain(&added).cloned().collect())
}

/// After an add on the master: a counter whose last full second's add rate is above
/// `ctr.spread-threshold` (0 = never) spreads itself to `ctr.spread-holders` holders. What
/// stops it (a floor, no free slot) leaves it as it is: the add itself has succeeded.
/// Inlined into every add: with the default threshold (0) it costs one load.
#[inline(always)]
pub fn after_add(ctx: Ctx, key: RawString) {
    let threshold = config::SPREAD_THRESHOLD.load(Relaxed);
    if threshold != 0 {
        spread_if_hot(ctx, key, threshold);
    }
}

#[inline(never)]
fn spread_if_hot(ctx: Ctx, key: RawString, threshold: i64) {
    if ctx.is_replaying() {
        return;
    }
    let target = usize::try_from(config::SPREAD_HOLDERS.load(Relaxed)).unwrap_or(0);
    let key_bytes = string_bytes(key);
    if parse_holder_name(key_bytes).is_some() {
        return; // a holder is never a home: a hot holder is its home's to spread further
    }
    let Ok(Some((rate, (current, spread_id)))) = with_counter(ctx, key, |c| {
        let rate = match c? {
            CounterRef::Inline(_) => super::decide::inline_counter_rate(key_bytes),
            CounterRef::Boxed(b) if b.floor().is_some() => return None,
            CounterRef::Boxed(b) => b.add_rate(),
        };
        Some((rate, current_spread(c)))
    }) else {
        return;
    };
    if i64::from(rate) > threshold
        && current.len() + 1 < target
        && grow(ctx, key, spread_id, &current, target).is_ok()
    {
        metrics::AUTO_SPREADS.incr();
    }
}

fn plan(
    home: &[u8],
    spread_id: u64,
    current: &[Vec<u8>],
    target: usize,
    owners: &impl SlotOwners,
    taken: &dyn Fn(&[u8]) -> bool,
) -> Result<Vec<Vec<u8>>, CommandError> {
    plan_holders_avoiding(home, spread_id, current, target, owners, taken).map_err(
        |PlanError::NoSlot| {
            CommandError::fixed("ERR no free slot found for a holder on some master")
        },
    )
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

fn names_reply<'a>(home: &[u8], holders: impl Iterator<Item = &'a Vec<u8>>) -> Reply {
    let mut names = vec![Reply::Bulk(home.to_vec())];
    names.extend(holders.map(|h| Reply::Bulk(h.clone())));
    Reply::Array(names)
}

/// One key being read: its own value and, for a home, its other holders.
struct Reading {
    home: Vec<u8>,
    /// The current holders, then (from `current` on) those still folding back.
    holders: Vec<Vec<u8>>,
    current: usize,
    /// Holder values, holder 0 (the key itself) first; None while unknown.
    values: Vec<Option<i64>>,
    /// How old each value is, in ms: 0 when read for this command, else its age in the cache.
    ages: Vec<i64>,
    /// Each holder's own floor as read with its value (None: no floor, or not read yet).
    floors: Vec<Option<i64>>,
}

impl Reading {
    fn total(&self) -> Result<i64, CommandError> {
        let values = self.values.iter().map(|v| v.unwrap_or(0));
        exact_sum(values).ok_or(OVERFLOW)
    }
}

/// How a finished read replies.
enum Finish {
    Get,
    MGet,
    /// The map of CTR.INFO, whose value becomes the total and which gains the holders (and,
    /// for a floored home read on one server, the floor fields).
    Info(Vec<(&'static str, Reply)>, Option<FlooredView>),
    /// CTR.CLEAR of a home (with its token stamp): the gathered holders go to the caller's
    /// `apply` (`spread_clear`'s), in the step that replies.
    Clear(Option<TokenStamp>, ApplyClear),
}

/// What completes a clear of a home once every holder answered: the home's name, each
/// holder's gathered units by name, and the clear's token stamp. Passed in by the clear's
/// own module, so that reads never depend on it.
pub type ApplyClear = fn(Ctx, &[u8], Vec<(&[u8], i64)>, Option<TokenStamp>) -> CommandResult;

fn reading(ctx: Ctx, key: RawString) -> Result<Reading, CommandError> {
    let own_units_only = reads_own_units_only(string_bytes(key));
    with_counter(ctx, key, |c| {
        let (holders, current) = if own_units_only {
            (Vec::new(), 0)
        } else {
            all_holders_of(c)
        };
        Reading {
            home: string_bytes(key).to_vec(),
            holders,
            current,
            values: vec![Some(c.map_or(0, held))],
            ages: vec![0],
            floors: vec![value_and_floor(c).1],
        }
    })
}

/// What a key counts for in a total: its value plus the value units it has sent and not had
/// acknowledged (a sealed holder's whole value until its home has it). A sum that overflows
/// (only a forged state holds one) counts the value alone.
fn held(c: CounterRef) -> i64 {
    match c {
        CounterRef::Boxed(b) => b.units_in_hand().unwrap_or(b.value()),
        other => other.value(),
    }
}

/// CTR.GET key: the value, or a spread counter's total.
pub fn get(ctx: Ctx, key: RawString) -> CommandResult {
    let own_units_only = reads_own_units_only(string_bytes(key));
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
        let values = readings.iter().map(|r| r.total().map(Reply::Integer));
        return Ok(Reply::Array(values.collect::<Result<_, _>>()?));
    }
    gather(ctx, readings, Finish::MGet)
}

/// CTR.CLEAR of a spread home (a home with holders, current or leaving): gathers the holders
/// afresh (never from the cache), then clears the total in one step on this master
/// (`apply`). A failed gather fails the clear and changes nothing.
pub fn clear_total(
    ctx: Ctx,
    key: RawString,
    token: Option<TokenStamp>,
    apply: ApplyClear,
) -> CommandResult {
    let r = reading(ctx, key)?;
    let home = r.home.clone();
    let reply = gather(ctx, vec![r], Finish::Clear(token, apply));
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
    let spread_floor = with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => b.spread().and_then(|s| s.floor),
        _ => None,
    })?;
    let view = spread_floor.map(|f| floored::floored_view(ctx, key, f, &r.holders));
    gather(ctx, vec![r], Finish::Info(fields, view))
}

fn finish(ctx: Ctx, readings: &[Reading], how: Finish) -> CommandResult {
    match how {
        Finish::Clear(token, apply) => {
            let r = &readings[0];
            // Every holder answered (a gather completes only then): never a partial sum.
            let gathered = r
                .holders
                .iter()
                .zip(&r.values[1..])
                .map(|(name, v)| v.map(|v| (name.as_slice(), v)))
                .collect::<Option<Vec<_>>>()
                .ok_or(CommandError::fixed(
                    "ERR spread counter total unavailable: a holder was not read",
                ))?;
            apply(ctx, &r.home, gathered, token)
        }
        Finish::Get => Ok(Reply::Integer(readings[0].total()?)),
        Finish::MGet => Ok(Reply::Array(
            readings
                .iter()
                .map(|r| r.total().map(Reply::Integer))
                .collect::<Result<_, _>>()?,
        )),
        Finish::Info(mut fields, view) => {
            let r = &readings[0];
            let total = r.total()?;
            // A floored counter shrunk to one key, its folds under way: its floor is the home's
            // own plus what its leaving holders hold (each sealed holder's floor is in hand until
            // the home has it), not the home's part alone.
            let folding_floor = match (&view, r.current, r.floors[0]) {
                (None, 0, Some(_)) => exact_sum(r.floors.iter().map(|f| f.unwrap_or(0))),
                _ => None,
            };
            if let Some(mut view) = view {
                let values: Vec<i64> = r.values.iter().map(|v| v.unwrap_or(0)).collect();
                // A holder without a floor of its own (never given budget) counts as floor 0.
                view.holder_floors = r.floors.iter().map(|f| f.unwrap_or(0)).collect();
                floored::info_fields(&mut fields, total, &values, &view);
            }
            for (name, value) in fields.iter_mut() {
                match (*name, folding_floor) {
                    ("value", _) => *value = Reply::Integer(total),
                    ("floor", Some(floor)) => *value = Reply::Integer(floor),
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

/// What a gather still waits for from one master.
struct Ask {
    node: NodeId,
    /// (reading, holder) of each name asked, in request order.
    holders: Vec<(usize, usize)>,
    answered: bool,
}

struct Pending {
    bc: *mut raw::RedisModuleBlockedClient,
    started_ms: i64,
    readings: Vec<Reading>,
    asks: Vec<Ask>,
    /// (reading, holder) of the holders this node serves, read from a timer (see `Plan`).
    locals: Vec<(usize, usize)>,
    finish: Finish,
}

impl Pending {
    fn complete(&self) -> bool {
        self.locals.is_empty() && self.asks.iter().all(|a| a.answered)
    }
}

/// What a gather must still do after the command returns.
#[derive(Default)]
struct Plan {
    asks: Vec<Ask>,
    /// Holders this node serves, in a cluster. They are read from a timer, not from inside the
    /// command: Valkey looks keys up in the slot of the command being executed (an
    /// optimisation that a nested `RM_Call` of another slot's key does not escape), so a holder
    /// read from inside `CTR.GET home` would be looked for in the home's slot and read as 0.
    locals: Vec<(usize, usize)>,
}

/// A home key's holder values as last gathered, with the holder names they were read from.
struct Gathered {
    at: i64,
    /// The holders read (current ones, then leaving ones), holder 0 implicit.
    holders: Vec<Vec<u8>>,
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
            && self.holders == holders
            && self.values.len() == holders.len() + 1
    }
}

thread_local! {
    static PENDING: RefCell<HashMap<u64, Pending>> = RefCell::new(HashMap::new());
    static NEXT_ID: Cell<u64> = const { Cell::new(0) };
    static CACHE: RefCell<HashMap<Vec<u8>, Gathered>> = RefCell::new(HashMap::new());
    /// Bytes of the holder names the cache keeps (bounded by CACHE_NAME_BYTES).
    static CACHE_BYTES: Cell<usize> = const { Cell::new(0) };
}

/// Bound on cached totals; past it the cache starts over.
const CACHE_LIMIT: usize = 10_000;
/// Bound on the bytes of holder names cached; past it the cache starts over.
const CACHE_NAME_BYTES: usize = 64 << 20;

impl Gathered {
    fn name_bytes(&self) -> usize {
        self.holders.iter().map(Vec::len).sum()
    }
}

fn forget_cached(home: &[u8]) {
    let gone = CACHE.with(|c| c.borrow_mut().remove(home));
    if let Some(g) = gone {
        CACHE_BYTES.with(|b| b.set(b.get().saturating_sub(g.name_bytes())));
    }
}

fn next_request_id() -> u64 {
    NEXT_ID.with(|n| {
        // Start from a random id so that a late answer to a previous life of this node cannot
        // match a new request.
        let id = match n.get() {
            0 => u64::from_le_bytes(crate::ffi::random_bytes()) | 1,
            id => id,
        };
        n.set(id.wrapping_add(1).max(1));
        id
    })
}

/// A holder's value and own floor (None: it has none), as one read.
type HolderRead = (i64, Option<i64>);

/// A holder's read, or the error its answer makes of the read.
fn answer_error(name: &[u8], answer: HolderAnswer) -> Result<HolderRead, CommandError> {
    match answer {
        HolderAnswer::Value(v) => Ok((v, None)),
        HolderAnswer::Floored(v, f) => Ok((v, Some(f))),
        HolderAnswer::NotHere => {
            cluster::forget_topology();
            Err(CommandError(
                format!(
                    "TRYAGAIN spread counter holder '{}' is moving between masters",
                    String::from_utf8_lossy(name)
                )
                .into(),
            ))
        }
        HolderAnswer::Failed(text) => Err(CommandError(
            format!(
                "ERR spread counter holder '{}': {text}",
                String::from_utf8_lossy(name)
            )
            .into(),
        )),
    }
}

/// Takes what it can from the cache and, outside a cluster, reads every holder at once; in a
/// cluster it blocks the client, reads the holders this node serves from a timer and asks the
/// other masters for theirs.
fn gather(ctx: Ctx, mut readings: Vec<Reading>, how: Finish) -> CommandResult {
    metrics::GATHERS.incr();
    let clearing = matches!(how, Finish::Clear(..));
    let Plan { asks, locals } = match start_gather(ctx, &mut readings, !clearing) {
        Err(e) => {
            metrics::GATHER_FAILURES.incr();
            return Err(e);
        }
        Ok(plan) => plan,
    };
    if asks.is_empty() && locals.is_empty() {
        metrics::record_gather_latency(0);
        return finish(ctx, &readings, how);
    }
    if ctx.flags()
        & (raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
        != 0
    {
        metrics::GATHER_FAILURES.incr();
        return Err(if clearing {
            CANNOT_BLOCK_CLEAR
        } else {
            CANNOT_BLOCK
        });
    }
    let id = next_request_id();
    let timeout = config::GATHER_TIMEOUT_MS.load(Relaxed);
    // SAFETY: ctx is the live context of a command that may block (checked above).
    let bc = unsafe {
        rm!(RedisModule_BlockClient)(
            ctx.ptr,
            Some(on_reply),
            Some(on_timeout),
            Some(free_result),
            timeout,
        )
    };
    // SAFETY: bc was just returned by BlockClient.
    unsafe { rm!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect)) };
    let pending = Pending {
        bc,
        started_ms: ctx.now_ms(),
        readings,
        asks,
        locals,
        finish: how,
    };
    send_requests(ctx.ptr, id, &pending);
    PENDING.with(|p| p.borrow_mut().insert(id, pending));
    arm_timer(ctx.ptr, id, 0, on_local_reads);
    arm_timer(ctx.ptr, id, RESEND_MS, on_resend);
    Ok(Reply::Blocked)
}

/// How often a gather asks again the masters that have not answered yet: bus delivery is best
/// effort (a message queued on a link that drops is lost, and a link can be down for a moment).
const RESEND_MS: i64 = 100;

/// Sends (again) the request of every master that has not answered. A send that fails (no
/// link right now) is retried at the next resend; the timeout bounds the whole wait.
fn send_requests(ctx: *mut raw::RedisModuleCtx, id: u64, pending: &Pending) {
    for ask in pending.asks.iter().filter(|a| !a.answered) {
        let names = ask
            .holders
            .iter()
            .map(|&(r, h)| pending.readings[r].holders[h - 1].as_slice());
        let payload = gather_msg::encode_request(id, names);
        cluster::send(ctx, &ask.node, MSG_GATHER_REQUEST, &payload);
    }
}

type TimerProc = unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void);

fn arm_timer(ctx: *mut raw::RedisModuleCtx, id: u64, after_ms: i64, proc_: TimerProc) {
    // SAFETY: ctx is live; the timer's data is the request id itself, not a pointer.
    unsafe { rm!(RedisModule_CreateTimer)(ctx, after_ms, Some(proc_), id as usize as *mut c_void) };
}

/// Timer: resends what is unanswered while the gather is pending, then re-arms.
unsafe extern "C" fn on_resend(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let id = data as usize as u64;
    let pending = PENDING.with(|p| {
        let table = p.borrow();
        table
            .get(&id)
            .map(|pending| send_requests(ctx, id, pending))
    });
    if pending.is_some() {
        arm_timer(ctx, id, RESEND_MS, on_resend);
    }
}

/// Timer: reads the holders this node serves (outside any command, so each key is looked up
/// in its own slot), then completes the gather if the other masters have answered.
unsafe extern "C" fn on_local_reads(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let id = data as usize as u64;
    // The names are taken out first: no table borrow is held across the reads.
    let Some(locals) = PENDING.with(|p| {
        let mut table = p.borrow_mut();
        let pending = table.get_mut(&id)?;
        let locals = std::mem::take(&mut pending.locals);
        Some(
            locals
                .into_iter()
                .map(|(r, h)| (r, h, pending.readings[r].holders[h - 1].clone()))
                .collect::<Vec<_>>(),
        )
    }) else {
        return;
    };
    let read: Result<Vec<(usize, usize, HolderRead)>, CommandError> = locals
        .into_iter()
        .map(|(r, h, name)| Ok((r, h, answer_error(&name, cluster::read_holder(ctx, &name))?)))
        .collect();
    let outcome = read.map(|values| {
        PENDING.with(|p| {
            if let Some(pending) = p.borrow_mut().get_mut(&id) {
                for (r, h, (v, f)) in values {
                    pending.readings[r].values[h] = Some(v);
                    pending.readings[r].floors[h] = f;
                }
            }
        })
    });
    settle(ctx, id, outcome);
}

/// Fills what can be had without waiting (from the cache only when `use_cache`); returns what
/// must be read or asked afterwards.
fn start_gather(ctx: Ctx, readings: &mut [Reading], use_cache: bool) -> Result<Plan, CommandError> {
    let topology = if cluster::in_cluster(ctx) {
        Some(cluster::topology(ctx, false)?)
    } else {
        None
    };
    let cache_ms = config::GATHER_CACHE_MS.load(Relaxed);
    let now = ctx.now_ms();
    let mut plan = Plan::default();
    for (r, reading) in readings.iter_mut().enumerate() {
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
        for h in 1..=reading.holders.len() {
            let name = &reading.holders[h - 1];
            let (value, floor, age) = match (&topology, &cached) {
                (None, _) => {
                    let (v, f) = answer_error(name, cluster::read_holder(ctx.ptr, name))?;
                    (Some(v), f, 0)
                }
                (Some(_), Some((age, values))) => (values[h], None, *age),
                (Some(t), None) => {
                    match t.remote_owner(key_slot(name))? {
                        None => plan.locals.push((r, h)),
                        Some(node) => match plan.asks.iter_mut().find(|a| a.node == node) {
                            Some(ask) => ask.holders.push((r, h)),
                            None => plan.asks.push(Ask {
                                node,
                                holders: vec![(r, h)],
                                answered: false,
                            }),
                        },
                    }
                    (None, None, 0)
                }
            };
            reading.values.push(value);
            reading.floors.push(floor);
            reading.ages.push(age);
        }
    }
    Ok(plan)
}

/// The gather's bus messages: a request (answered for each holder this node serves) and a
/// response (recorded; once every master has answered, the client is unblocked).
struct GatherMessages;

impl cluster::BusReceiver for GatherMessages {
    fn receive(ctx: Ctx, from: NodeId, kind: u8, payload: &[u8]) {
        match kind {
            MSG_GATHER_REQUEST => answer_gather(ctx, from, payload),
            MSG_GATHER_RESPONSE => record_gather_answers(ctx, from, payload),
            _ => {}
        }
    }
}

fn answer_gather(ctx: Ctx, from: cluster::NodeId, bytes: &[u8]) {
    let Ok((id, names)) = gather_msg::decode_request(bytes) else {
        return; // malformed: the asker times out
    };
    let answers: Vec<HolderAnswer> = names
        .iter()
        .map(|name| cluster::read_holder(ctx.ptr, name))
        .collect();
    let response = gather_msg::encode_response(id, &answers);
    metrics::GATHER_REQUESTS_SERVED.incr();
    cluster::send(ctx.ptr, &from, MSG_GATHER_RESPONSE, &response);
}

fn record_gather_answers(ctx: Ctx, from: cluster::NodeId, bytes: &[u8]) {
    let Ok((id, answers)) = gather_msg::decode_response(bytes) else {
        return;
    };
    let outcome = PENDING.with(|p| {
        let mut table = p.borrow_mut();
        record_answers(table.get_mut(&id)?, &from, answers)
    });
    if let Some(outcome) = outcome {
        settle(ctx.ptr, id, outcome);
    }
}

/// After a step of gather `id`: on an error, or once everything is in, removes the gather and
/// unblocks its client with the result.
fn settle(ctx: *mut raw::RedisModuleCtx, id: u64, outcome: Result<(), CommandError>) {
    let now = Ctx { ptr: ctx }.now_ms();
    let done = PENDING.with(|p| {
        let mut table = p.borrow_mut();
        let complete = outcome.is_err() || table.get(&id)?.complete();
        complete.then(|| table.remove(&id)).flatten()
    });
    let Some(pending) = done else {
        return;
    };
    let mut readings = pending.readings;
    let result = outcome.and_then(|()| {
        metrics::record_gather_latency(now.saturating_sub(pending.started_ms));
        remember(&readings, now);
        sum_time_view(Ctx { ptr: ctx }, &mut readings);
        finish(Ctx { ptr: ctx }, &readings, pending.finish)
    });
    if result.is_err() {
        metrics::GATHER_FAILURES.incr();
    }
    let boxed = Box::into_raw(Box::new(result)).cast::<c_void>();
    // SAFETY: bc is blocked and unblocked once: its entry was just removed from the table.
    unsafe { rm!(RedisModule_UnblockClient)(pending.bc, boxed) };
}

/// Takes each home's own state as it is now, when the total is summed (the holders were read
/// earlier, one by one): its value, and which holders still count. A holder that is neither a
/// current holder nor still leaving has been folded back since it answered: its units are in
/// the home's value now, so its answer counts 0. A leaving holder still listed has not had its
/// credit applied (the credit removes it from `leaving` in the same write that adds its units
/// to the home), so its answer, which includes whatever it sent, is counted once. Both facts
/// come from one read of the home on this thread, between two writes: every unit is counted
/// exactly once at every step of a fold.
fn sum_time_view(ctx: Ctx, readings: &mut [Reading]) {
    for r in readings.iter_mut().filter(|r| !r.holders.is_empty()) {
        let home = KeyName::new(ctx, &r.home);
        let now = with_counter(ctx, home.raw, |c| {
            let (names, _) = all_holders_of(c);
            c.map(|c| (held(c), value_and_floor(Some(c)).1, names))
        });
        let Ok(Some((value, floor, names))) = now else {
            continue; // the home moved away or changed type: keep what was read
        };
        r.values[0] = Some(value);
        r.floors[0] = floor;
        for (i, name) in r.holders.iter().enumerate() {
            if !names.contains(name) {
                r.values[i + 1] = Some(0);
                r.floors[i + 1] = None;
            }
        }
    }
}

/// Stores one master's answers in a pending gather. None when the sender was not asked (or
/// answered already); Some(Err) when an answer fails the read.
fn record_answers(
    pending: &mut Pending,
    from: &NodeId,
    answers: Vec<HolderAnswer>,
) -> Option<Result<(), CommandError>> {
    let ask = pending
        .asks
        .iter_mut()
        .find(|a| &a.node == from && !a.answered)?;
    if answers.len() != ask.holders.len() {
        return None;
    }
    ask.answered = true;
    for (&(r, h), answer) in ask.holders.iter().zip(answers) {
        let reading = &mut pending.readings[r];
        match answer_error(&reading.holders[h - 1], answer) {
            Ok((v, f)) => {
                reading.values[h] = Some(v);
                reading.floors[h] = f;
            }
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(()))
}

/// Caches the gathered holder values (only when a cache is configured).
fn remember(readings: &[Reading], now: i64) {
    if config::GATHER_CACHE_MS.load(Relaxed) == 0 {
        return;
    }
    CACHE.with(|c| {
        let mut cache = c.borrow_mut();
        if cache.len() >= CACHE_LIMIT || CACHE_BYTES.with(Cell::get) >= CACHE_NAME_BYTES {
            cache.clear();
            CACHE_BYTES.with(|b| b.set(0));
        }
        // Floored holders are read afresh every time: the cache keeps values, not floors.
        let unfloored = |r: &&Reading| r.floors.iter().all(Option::is_none);
        for r in readings
            .iter()
            .filter(|r| !r.holders.is_empty())
            .filter(unfloored)
        {
            let entry = Gathered {
                at: now,
                holders: r.holders.clone(),
                values: r.values.clone(),
            };
            let added = entry.name_bytes();
            let replaced = cache
                .insert(r.home.clone(), entry)
                .map_or(0, |g| g.name_bytes());
            CACHE_BYTES.with(|b| b.set(b.get().saturating_add(added).saturating_sub(replaced)));
        }
    });
}

/// Removes the pending gather of a blocked client (timed out or gone).
fn drop_pending(bc: *mut raw::RedisModuleBlockedClient) -> Option<Pending> {
    PENDING.with(|p| {
        let mut table = p.borrow_mut();
        let id = table.iter().find(|(_, v)| v.bc == bc).map(|(k, _)| *k)?;
        table.remove(&id)
    })
}

unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the private data is the boxed result given to UnblockClient.
    let result =
        unsafe { rm!(RedisModule_GetBlockedClientPrivateData)(ctx) }.cast::<CommandResult>();
    let ctx = Ctx { ptr: ctx };
    // SAFETY: non-null results are ours and live until free_result.
    match unsafe { result.as_ref() } {
        Some(Ok(reply)) => ctx.reply(reply),
        Some(Err(e)) => ctx.reply_error(e),
        None => ctx.reply_error(&CommandError::fixed(
            "ERR spread counter read lost its result",
        )),
    }
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: ctx is the timeout context of a blocked client.
    let bc = unsafe { rm!(RedisModule_GetBlockedClientHandle)(ctx) };
    let silent = drop_pending(bc).map_or(0, |p| p.asks.iter().filter(|a| !a.answered).count());
    metrics::GATHER_FAILURES.incr();
    metrics::GATHER_TIMEOUTS.incr();
    Ctx { ptr: ctx }.reply_error(&CommandError(
        format!(
            "ERR spread counter total unavailable: {silent} master(s) did not answer within ctr.gather-timeout-ms"
        )
        .into(),
    ));
    // A client blocked without keys is released only by UnblockClient, timed out or not.
    // SAFETY: bc is live until this call; its entry is gone, so no answer unblocks it again.
    unsafe { rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut()) };
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_disconnect(
    _ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    if drop_pending(bc).is_some() {
        // SAFETY: as in on_timeout.
        unsafe { rm!(RedisModule_UnblockClient)(bc, std::ptr::null_mut()) };
    }
}

unsafe extern "C" fn free_result(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: the box given to UnblockClient, freed once here.
        drop(unsafe { Box::from_raw(data.cast::<CommandResult>()) });
    }
}

/// Registers the bus receivers (harmless outside a cluster).
pub fn register(ctx: *mut raw::RedisModuleCtx) {
    cluster::register_receiver::<GatherMessages>(ctx, &[MSG_GATHER_REQUEST, MSG_GATHER_RESPONSE]);
}
