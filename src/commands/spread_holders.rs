//! CTR.HOLDERS: a spread counter's holder names, read from the home key alone; and the
//! refusal of writes that would make a look-alike holder (a key named like a holder that its
//! home does not list): read here outside a cluster, asked of the home's master in one
//! (`holder_check`).
//!
//! Unlike `CTR.INFO` (which gathers every holder's value from the other masters and so waits
//! for the slowest), this reads only what the home's master has recorded: it answers at once
//! while another master is down or frozen. Client libraries refresh their holder lists with it.

use super::ctr_args::event_time;
use super::ctr_spread::refuse_holder;
use crate::counter::listing::{ListClock, ListedAtError};
use crate::counter::spread::{may_be_holder_name, parse_holder_name};
use crate::counter::token_expiry;
use crate::counter::CounterRef;
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, Reply};
use crate::runtime::ctr_store::{is_missing, list_clock, with_counter, SEALED};
use crate::runtime::holder_check::{self, look_alike_error, Checked, Rerun};
use crate::runtime::home_names::living_home;
use crate::runtime::listing_gate;
use crate::runtime::spread_cluster::in_cluster;
use crate::runtime::spread_transfer::{is_master, serves};
use crate::runtime::waiter;

/// CTR.HOLDERS key [AT ms]
///
/// The holders' names, the home (the key as given) first, as `CTR.SPREAD` replies them: the
/// current holders only (those a shrink is still folding back are not written any more). A key
/// that is missing or not spread replies `[key]` (its adds go to the key itself); another type
/// is WRONGTYPE; a key named as a holder is refused with the holder error, as `CTR.SPREAD` does
/// (a holder is never a home, and its own holder list would mean nothing).
///
/// With `AT ms`, the holders in force at that time, from the home's listing
/// (`crate::counter::listing`): those a shrink unlisted since are included, those a grow listed
/// since are not. It is the list a purchase of that time walks by the probe rule, the same for
/// its first send and every retry, so a token is granted at most once.
pub fn holders(ctx: Ctx, args: &Args) -> CommandResult {
    let at = match args.len() {
        2 => None,
        4 if args.bytes(2).eq_ignore_ascii_case(b"AT") => Some(event_time(args.bytes(3))?),
        4 => return Err(CommandError::fixed("ERR syntax error")),
        _ => return Err(super::wrong_arity("ctr.holders")),
    };
    let home = args.bytes(1);
    let others = match at {
        None => with_counter(ctx, args.raw(1), |c| match c {
            Some(CounterRef::Boxed(b)) => b.spread().map(|s| s.holders.clone()).unwrap_or_default(),
            _ => Vec::new(),
        })?,
        Some(at) => match listed_at(ctx, args, at)? {
            Some(listed) => listed,
            None => return wait_for_replicas(ctx, args),
        },
    };
    refuse_holder(ctx, home)?;
    let mut names = Vec::with_capacity(others.len() + 1);
    names.push(Reply::Bulk(home.to_vec()));
    names.extend(others.into_iter().map(Reply::Bulk));
    Ok(Reply::Array(names))
}

/// The holders the home at `args[1]` listed at `at` (the home not included); None while this
/// master's replicas may not hold its latest holder list change (`listing_gate`).
fn listed_at(ctx: Ctx, args: &Args, at: i64) -> Result<Option<Vec<Vec<u8>>>, CommandError> {
    if !is_master(ctx) {
        // A replica may not hold a grow or shrink dated before `at` yet: its answer could
        // differ from the one its master gives later, and a retry would walk another list.
        return Err(CommandError::fixed(
            "ERR CTR.HOLDERS AT is answered by the home's master only (a replica may not hold \
             its latest grow or shrink yet)",
        ));
    }
    let ListClock {
        now_ms: now,
        window_ms,
    } = list_clock(ctx);
    // The token window's rule, as a purchase of that time meets it; a time ahead of the
    // home's clock is refused below, with that clock.
    token_expiry(at, now, window_ms, i64::MAX)?;
    if !listing_gate::lists_held(ctx) {
        return Ok(None);
    }
    let listed = with_counter(ctx, args.raw(1), |c| match c {
        Some(CounterRef::Boxed(b)) => b.holders_at(at, now),
        _ if at > now => Err(ListedAtError::Ahead { now }),
        _ => Ok(Vec::new()),
    })?;
    listed.map(Some).map_err(|e| match e {
        ListedAtError::Ahead { now } => CommandError(
            format!(
            "ERR AT is ahead of the home's clock (now {now}): its holders then are not decided yet"
        )
            .into(),
        ),
        ListedAtError::Unknown {
            known_since: i64::MAX,
        } => CommandError::fixed(
            "ERR the holder list at that time is not known: the counter was spread by an \
             earlier version (known from its next grow or shrink on)",
        ),
        ListedAtError::Unknown { known_since } => CommandError(
            format!("ERR the holder list at that time is not known (known from {known_since} on)")
                .into(),
        ),
    })
}

/// Blocks `CTR.HOLDERS ... AT` until this master's replicas hold its latest holder list change
/// (it then runs again), up to `ctr.purchase-wait-ms`; where its client cannot wait, a
/// `TRYAGAIN` now.
fn wait_for_replicas(ctx: Ctx, args: &Args) -> CommandResult {
    let bound_ms = crate::config::PURCHASE_WAIT_MS.load(std::sync::atomic::Ordering::Relaxed);
    let still_waits = Box::new(|_| !listing_gate::open_as_proven());
    if waiter::wait(ctx, args.bytes(1), holders, still_waits, serves, bound_ms) {
        listing_gate::ask_until_open(ctx, bound_ms);
        return Ok(Reply::Blocked);
    }
    Err(CommandError::fixed(
        "TRYAGAIN the replicas of the home's master do not hold its latest holder list change \
         yet (a failover could lose it): retry CTR.HOLDERS AT",
    ))
}

/// Refuses a client write that would create `name` (the missing key `key`), a key named like a
/// holder, when no home of that spread lists it. Outside a cluster the home it names is a key of
/// this server, read here (under the name the holders carry, or the name this server saw it
/// renamed to). In a cluster the home's master is asked and the client waits
/// (`holder_check`: [`Checked::Blocked`], and `rerun`, the command, runs again once the holder
/// is listed). A key that exists is a holder made by an earlier write or by the spread protocol
/// (budget credits create floored holders), and a replayed write was decided by its master:
/// both go on.
#[inline]
pub fn refuse_look_alike(
    ctx: Ctx,
    key: &Key,
    name: &[u8],
    rerun: Rerun,
) -> Result<Checked, CommandError> {
    // The common case first and without a call: a name not like a holder's.
    if !may_be_holder_name(name) {
        return Ok(Checked::Go);
    }
    refuse_tagged_look_alike(ctx, key, name, rerun)
}

#[inline(never)]
fn refuse_tagged_look_alike(
    ctx: Ctx,
    key: &Key,
    name: &[u8],
    rerun: Rerun,
) -> Result<Checked, CommandError> {
    // The cheapest first: a key that exists (every add at a holder after its first: the key
    // is open, no parse), then a name not like a holder's.
    if !is_missing(key) || ctx.is_replaying() {
        return Ok(Checked::Go);
    }
    let Some(holder) = parse_holder_name(name) else {
        return Ok(Checked::Go);
    };
    // The holder sealed and renamed away, its fold unanswered: the name is still being folded
    // back, and a key made there now would be folded into the same fold and lost.
    if crate::runtime::spread_transfer::fold_carried_elsewhere(ctx, name) {
        return Err(SEALED);
    }
    if in_cluster(ctx) {
        return holder_check::check(ctx, key, name, rerun);
    }
    let listed = living_home(ctx, holder.home, holder.spread_id)
        .is_some_and(|home| holder_check::home_lists(ctx, &home, name));
    if listed {
        return Ok(Checked::Go);
    }
    Err(look_alike_error(name, holder.home))
}
