//! Spread counters: CTR.SPREAD (growing, shrinking, auto-spread) and the refusal of whole-counter
//! commands on a holder. The gathered reads of a home key (CTR.GET, CTR.MGET and CTR.INFO give
//! the total over every holder) are in [`crate::runtime::spread_gather`], re-exported here.

use std::sync::atomic::Ordering::Relaxed;

use super::parse::integer;
use crate::config;
use crate::counter::folded::first_attempt_at;
use crate::counter::spread::{
    carried_home, first_attempt_for, parse_holder_name, plan_holders_avoiding, spread_id_from,
    PlanError, SlotOwners, Standalone, MAX_HOLDERS, MAX_HOME_NAME,
};
use crate::counter::transfer::Transfers;
use crate::counter::{CounterRef, Spread};
use crate::ffi::{
    string_bytes, Args, CommandError, CommandResult, Ctx, Key, KeyName, RawString, Reply,
};
use crate::metrics;
use crate::persist::ctr_format;
use crate::runtime::bounded_spread as bounded;
use crate::runtime::ctr_store::{list_change_clock, publish_state, update_counter, with_counter};
use crate::runtime::holder_admission;
use crate::runtime::spread_cluster as cluster;
use crate::runtime::spread_gather::{forget_cached, names_reply};
pub use crate::runtime::spread_gather::{get, info, mget, write_total, ApplyTotal, TotalWrite};
use crate::runtime::spread_transfer::serves;
use crate::runtime::waiter;

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
    crate::runtime::ctr_store::refuse_unwritable(ctx, args.raw(1))?;
    let (current, spread_id) = with_counter(ctx, args.raw(1), current_spread)?;
    if target < current.len() + 1 {
        // The reply comes at once; the removed holders fold back in the background (CTR.INFO
        // lists them under `leaving` until then), and reads stay exact meanwhile.
        let kept = crate::runtime::spread_transfer::begin_fold(ctx, args.raw(1), target)?;
        forget_cached(home);
        return Ok(names_reply(home, kept.iter()));
    }
    if target > current.len() + 1 {
        // A grow run again once its names were found free plans on the same slot map.
        let map = match waiter::rerunning() {
            true => SlotMap::Cached,
            false => SlotMap::Fresh,
        };
        let asked = GrowTo {
            key: args.raw(1),
            spread_id,
            current: &current,
            target,
            map,
        };
        return match grow(ctx, &asked)? {
            Some(all) => Ok(names_reply(home, all.iter())),
            None => wait_for_names(ctx, args, target),
        };
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

/// The new holders of a grow: their names (each free on its master), the spread's id, and
/// whether the counter is floored.
struct GrowPlan {
    spread_id: u64,
    added: Vec<Vec<u8>>,
    /// Floored or ceiled: its holders take shares of its bounds.
    is_bounded: bool,
}

/// Which slot map a grow plans on: read afresh (a client's `CTR.SPREAD`), or the one read at
/// most a second ago (a grow waiting for its names, run again once they are free, or made by an
/// add: the names planned again must be those asked about, and an add must not read the map).
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotMap {
    Fresh,
    Cached,
}

/// A grow: of the counter at `key`, with its spread's id (None: not spread yet) and its current
/// holders, to `target` holders, planned on `map`.
struct GrowTo<'a> {
    key: RawString,
    spread_id: Option<u64>,
    current: &'a [Vec<u8>],
    target: usize,
    map: SlotMap,
}

/// Adds holders to reach `target` (more than `current` has), records them and replicates the
/// resulting state; returns every holder's name but the home's, or None while the masters of
/// the new names are asked whether those are free (`holder_admission`: the command then
/// waits). A counter spreading afresh (`spread_id` None) gets a random id here, on the master;
/// replicas and the AOF get it with the state.
fn grow(ctx: Ctx, asked: &GrowTo) -> Result<Option<Vec<Vec<u8>>>, CommandError> {
    let Some(GrowPlan {
        spread_id,
        added,
        is_bounded,
    }) = plan_grow(ctx, asked)?
    else {
        return Ok(None);
    };
    let (key_name, current) = (asked.key, asked.current);
    let home = string_bytes(key_name);
    let in_cluster = cluster::in_cluster(ctx);
    if is_bounded && in_cluster {
        bounded::spread_bounded_across_masters(ctx, key_name, spread_id, current, &added)?;
    } else if is_bounded {
        bounded::spread_bounded(ctx, key_name, spread_id, current, &added)?;
    } else {
        let key = Key::open(ctx, key_name, true);
        let state = update_counter(&key, |c, _| {
            let spread = Spread {
                id: spread_id,
                holders: current.iter().chain(&added).cloned().collect(),
                floor: None,
                ceiling: None,
            };
            c.list_spread(spread, list_change_clock(ctx))?;
            Ok(ctr_format::encode(c))
        })?;
        drop(key);
        publish_state(ctx, key_name, &state)?;
    }
    metrics::SPREADS.incr();
    forget_cached(home);
    Ok(Some(current.iter().chain(&added).cloned().collect()))
}

/// Plans the names of a grow's new holders. A grow of a spread that has an id (its names
/// follow from public facts) lists only names where no key sits: each taken one is planned
/// again at a later attempt, and in a cluster the plan is None until every name's master has
/// answered. A first spread's fresh random id makes names no one could know in advance.
fn plan_grow(ctx: Ctx, asked: &GrowTo) -> Result<Option<GrowPlan>, CommandError> {
    let GrowTo {
        key: key_name,
        spread_id,
        current,
        target,
        map,
    } = *asked;
    let home = string_bytes(key_name);
    if home.len() > MAX_HOME_NAME {
        return Err(CommandError::fixed(
            "ERR key name too long to spread (at most 1024 bytes)",
        ));
    }
    let in_cluster = cluster::in_cluster(ctx);
    let (is_floored, is_ceiled) = with_counter(ctx, key_name, |c| match c {
        Some(CounterRef::Boxed(b)) => (b.floor().is_some(), b.ceiling().is_some()),
        _ => (false, false),
    })?;
    // A floored counter's spread id is odd, an unfloored one's even: a holder's name alone
    // then keeps it at or above 0 until its first budget credit gives it a floor.
    // What the home knows of its earlier holders: names a new holder must not take (a folded
    // one may still exist, sealed), and spread ids it retired (never drawn again).
    let known: Option<Transfers> = with_counter(ctx, key_name, |c| match c {
        Some(CounterRef::Boxed(b)) => b.transfers().cloned(),
        _ => None,
    })?;
    let retired = |id: u64| known.as_ref().is_some_and(|t| t.retired.contains(&id));
    let fresh_id = spread_id.is_none();
    let spread_id = spread_id.unwrap_or_else(|| loop {
        let id = spread_id_from(crate::ffi::random_bytes(), is_floored);
        if !retired(id) {
            break id;
        }
    });
    // What a new holder's name must avoid: a name the home knows or one found taken (outside
    // a cluster, read here and now), an attempt before one it knows at that index.
    let admitted = !fresh_id;
    let taken = |name: &[u8]| {
        known.as_ref().is_some_and(|t| t.knows_name(name))
            || (admitted && holder_admission::is_taken(ctx, name, in_cluster))
    };
    let later = known.as_ref().map(|t| t.first_attempts(spread_id));
    // A ceiled spread's names say it (attempts from CEILED_ATTEMPTS): a holder's name alone then
    // keeps it at or below 0 until its first budget credit gives it a ceiling.
    let first_attempt = |index: usize| {
        first_attempt_for(
            is_ceiled,
            later.as_ref().map_or(0, |l| first_attempt_at(l, index)),
        )
    };
    let avoid: Avoid = (&taken, &first_attempt);
    // New holders carry the home name the others carry (a home renamed since keeps it).
    let carried = carried_home(current.iter().map(Vec::as_slice)).unwrap_or(home);
    let topology = match in_cluster {
        true => Some(cluster::topology(ctx, map == SlotMap::Fresh)?),
        false => None,
    };
    let added = match &topology {
        Some(t) => plan(carried, spread_id, current, target, &**t, avoid),
        None => plan(carried, spread_id, current, target, &Standalone, avoid),
    }?;
    // Outside a cluster the planner read each name; in one, their masters must have answered.
    if admitted && in_cluster && !holder_admission::all_known_free(ctx, home, &added) {
        return Ok(None);
    }
    Ok(Some(GrowPlan {
        spread_id,
        added,
        is_bounded: is_floored || is_ceiled,
    }))
}

/// Blocks the client of a grow until the masters of its new names have said they are free
/// (`holder_admission`), up to `ctr.gather-timeout-ms` (the asks' own deadline): the grow then
/// runs again and lists them.
/// Where a client cannot wait (MULTI, a script), or past the bound, a retryable refusal.
fn wait_for_names(ctx: Ctx, args: &Args, target: usize) -> CommandResult {
    let home = args.bytes(1).to_vec();
    let still_waits: waiter::StillWaits = Box::new(move |ctx| {
        let name = KeyName::new(ctx, &home);
        let Ok((current, spread_id)) = with_counter(ctx, name.raw, current_spread) else {
            return false;
        };
        let asked = GrowTo {
            key: name.raw,
            spread_id,
            current: &current,
            target,
            map: SlotMap::Cached,
        };
        target > current.len() + 1 && matches!(plan_grow(ctx, &asked), Ok(None))
    });
    // As long as the asks themselves may take.
    let bound_ms = config::GATHER_TIMEOUT_MS.load(Relaxed);
    if waiter::wait(ctx, args.bytes(1), spread, still_waits, serves, bound_ms) {
        metrics::GROWS_WAITED.incr();
        return Ok(Reply::Blocked);
    }
    Err(CommandError(
        format!(
            "TRYAGAIN spread counter '{}' is checking that the names of its new holders are free on their masters; retry CTR.SPREAD",
            String::from_utf8_lossy(args.bytes(1))
        )
        .into(),
    ))
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
            CounterRef::Inline(_) => crate::runtime::decide::inline_counter_rate(key_bytes),
            CounterRef::Boxed(b) if b.floor().is_some() || b.ceiling().is_some() => return None,
            CounterRef::Limiter(_) => return None, // a limiter's key takes no adds
            CounterRef::Boxed(b) => b.add_rate(),
        };
        Some((rate, current_spread(c)))
    }) else {
        return;
    };
    // A grow whose new names are still asked about is made by a later add.
    if i64::from(rate) > threshold
        && current.len() + 1 < target
        && grow(
            ctx,
            &GrowTo {
                key,
                spread_id,
                current: &current,
                target,
                map: SlotMap::Cached,
            },
        )
        .is_ok_and(|grown| grown.is_some())
    {
        metrics::AUTO_SPREADS.incr();
    }
}

/// What a new holder's name must avoid: the names the home knows, and at each index the
/// attempts before the first one it may take.
type Avoid<'a> = (&'a dyn Fn(&[u8]) -> bool, &'a dyn Fn(usize) -> u32);

fn plan(
    home: &[u8],
    spread_id: u64,
    current: &[Vec<u8>],
    target: usize,
    owners: &impl SlotOwners,
    (taken, first_attempt): Avoid,
) -> Result<Vec<Vec<u8>>, CommandError> {
    plan_holders_avoiding(
        home,
        spread_id,
        current,
        target,
        owners,
        taken,
        first_attempt,
    )
    .map_err(|PlanError::NoSlot| {
        CommandError::fixed("ERR no free slot found for a holder on some master")
    })
}
