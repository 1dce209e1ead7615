//! Spread counters: CTR.SPREAD (growing, shrinking, auto-spread) and the refusal of whole-counter
//! commands on a holder. The gathered reads of a home key (CTR.GET, CTR.MGET and CTR.INFO give
//! the total over every holder) are in [`crate::runtime::spread_gather`], re-exported here.

use std::sync::atomic::Ordering::Relaxed;

use super::parse::integer;
use crate::config;
use crate::counter::folded::first_attempt_at;
use crate::counter::spread::{
    carried_home, parse_holder_name, plan_holders_avoiding, spread_id_from, PlanError, SlotOwners,
    Standalone, MAX_HOLDERS, MAX_HOME_NAME,
};
use crate::counter::transfer::Transfers;
use crate::counter::{CounterRef, Spread};
use crate::ffi::{string_bytes, Args, CommandError, CommandResult, Ctx, Key, RawString};
use crate::metrics;
use crate::persist::ctr_format;
use crate::runtime::ctr_floor_spread as floored;
use crate::runtime::ctr_store::{publish_state, update_counter, with_counter};
use crate::runtime::spread_cluster as cluster;
use crate::runtime::spread_gather::{forget_cached, names_reply};
pub use crate::runtime::spread_gather::{get, info, mget, write_total, ApplyTotal, TotalWrite};

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
    let ceiled = with_counter(
        ctx,
        args.raw(1),
        |c| matches!(c, Some(CounterRef::Boxed(b)) if b.ceiling().is_some()),
    )?;
    if ceiled {
        return Err(crate::counter::CounterError::CeilingOnSpread.into());
    }
    let (current, spread_id) = with_counter(ctx, args.raw(1), current_spread)?;
    if target < current.len() + 1 {
        // The reply comes at once; the removed holders fold back in the background (CTR.INFO
        // lists them under `leaving` until then), and reads stay exact meanwhile.
        let kept = crate::runtime::spread_transfer::begin_fold(ctx, args.raw(1), target)?;
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
    let is_floored = crate::runtime::ctr_store::floor_of(ctx, key_name)?.is_some();
    // A floored counter's spread id is odd, an unfloored one's even: a holder's name alone
    // then keeps it at or above 0 until its first budget credit gives it a floor.
    // What the home knows of its earlier holders: names a new holder must not take (a folded
    // one may still exist, sealed), and spread ids it retired (never drawn again).
    let known: Option<Transfers> = with_counter(ctx, key_name, |c| match c {
        Some(CounterRef::Boxed(b)) => b.transfers().cloned(),
        _ => None,
    })?;
    let retired = |id: u64| known.as_ref().is_some_and(|t| t.retired.contains(&id));
    let spread_id = spread_id.unwrap_or_else(|| loop {
        let id = spread_id_from(crate::ffi::random_bytes(), is_floored);
        if !retired(id) {
            break id;
        }
    });
    let taken = |name: &[u8]| known.as_ref().is_some_and(|t| t.knows_name(name));
    let later = known.as_ref().map(|t| t.first_attempts(spread_id));
    let first_attempt = |index: usize| later.as_ref().map_or(0, |l| first_attempt_at(l, index));
    // What a new holder's name must avoid: a name the home knows, an attempt before one it
    // knows at that index.
    let avoid: Avoid = (&taken, &first_attempt);
    // New holders carry the home name the others carry (a home renamed since keeps it).
    let carried = carried_home(current.iter().map(Vec::as_slice)).unwrap_or(home);
    let added = if in_cluster {
        plan(
            carried,
            spread_id,
            current,
            target,
            &*cluster::topology(ctx, true)?,
            avoid,
        )
    } else {
        plan(carried, spread_id, current, target, &Standalone, avoid)
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
            CounterRef::Inline(_) => crate::runtime::decide::inline_counter_rate(key_bytes),
            CounterRef::Boxed(b) if b.floor().is_some() || b.ceiling().is_some() => return None,
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
