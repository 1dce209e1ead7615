//! A gathered read of a spread home whose slot is being handed over to another master (atomic
//! slot migration: the source pauses writes for the handoff) waits in the server for the
//! handoff to end, instead of failing at once: once writes are paused the source may have lost
//! the slot already without knowing, and its copy of the home stops being the counter's
//! (`slot_migration`, rule 2). The read's client stays blocked (the gather blocks it, and
//! parks it here) for up to `ctr.purchase-wait-ms`, the bound of every wait in the server; a
//! tick (every [`TICK_MS`]) looks at the parked reads, and once the handoff has ended:
//! - the slot is still served here (the migration was given up): the read takes the home
//!   afresh and gathers as it would have ([`Outcome::Served`]);
//! - the slot moved: the read replies `MOVED <slot> <ip>:<port>` naming its new master, as the
//!   server itself redirects a command on a key it does not serve (any cluster client follows
//!   it at once), or `TRYAGAIN` when that master's address is not known;
//! - past the bound, still handing off: `TRYAGAIN`, as before the wait.
//!
//! A read (or a clear, a reconcile of a spread home) whose gather failed because a holder's
//! slot is being handed over between two other masters (both say "not here", `spread_gather`)
//! parks here too, to gather again a moment later, within the same bound from its arrival.
//!
//! A read cannot park where its client cannot be blocked (MULTI/EXEC, scripts, a command run
//! again from a reply callback) or past [`MAX_PARKED`]: it replies `TRYAGAIN` at once.

use std::cell::RefCell;
use std::sync::atomic::Ordering::Relaxed;

use super::scheduler::{self, Job, When};
use super::slot_migration::handing_off;
use super::spread_cluster as cluster;
use super::waiter;
use crate::config;
use crate::counter::spread::key_slot;
use crate::ffi::{CommandError, Ctx};
use crate::metrics;

/// How often parked reads look at their handoff.
const TICK_MS: i64 = 10;
/// The most reads parked on this node; past it a read replies `TRYAGAIN` at once.
pub const MAX_PARKED: usize = 10_000;

/// How a parked read goes on.
pub enum Outcome {
    /// The home's slot is served here: read it afresh and gather.
    Served,
    /// Reply this error (a redirection, or `TRYAGAIN`).
    Refused(CommandError),
}

/// What a parked read runs once its handoff ended (or its bound passed).
pub type Resume = Box<dyn FnOnce(Ctx, Outcome)>;

struct Parked {
    /// The blocked client's handle, as the gather knows it.
    client: usize,
    wait: Wait,
    resume: Resume,
}

#[derive(Default)]
struct Table {
    parked: Vec<Parked>,
}

thread_local! {
    static PARKED: RefCell<Table> = RefCell::new(Table::default());
}

/// The retryable refusal of a read of a home whose slot is being handed over.
pub fn moving_error(home: &[u8]) -> CommandError {
    CommandError(
        format!(
            "TRYAGAIN spread counter '{}' is moving between masters",
            String::from_utf8_lossy(home)
        )
        .into(),
    )
}

/// How long a read may stay parked (`ctr.purchase-wait-ms`); None when the command running in
/// `ctx` cannot park (its client cannot be blocked, the bound is 0, the table is full).
pub fn park_bound(ctx: Ctx) -> Option<i64> {
    let bound = config::PURCHASE_WAIT_MS.load(Relaxed);
    let can =
        bound > 0 && ctx.can_block() && !waiter::rerunning() && !ctx.is_replaying() && has_room();
    can.then_some(bound)
}

/// True while fewer than [`MAX_PARKED`] reads are parked.
pub fn has_room() -> bool {
    PARKED.with(|t| t.borrow().parked.len() < MAX_PARKED)
}

/// What a parked read waits for: the end of the handoff of `home`'s slot, and `retry_at_ms`
/// (a read whose holder was moving gathers again a moment later); at `deadline_ms` it goes on
/// whatever the handoff.
pub struct Wait {
    pub home: Vec<u8>,
    pub retry_at_ms: i64,
    pub deadline_ms: i64,
}

/// Parks the read of blocked `client` until `wait` is over; `resume` then runs from a timer.
pub fn park(ctx: Ctx, client: usize, wait: Wait, resume: Resume) {
    metrics::COMMANDS_WAITED.incr();
    let parked = Parked {
        client,
        wait,
        resume,
    };
    PARKED.with(|t| t.borrow_mut().parked.push(parked));
    scheduler::arm_once(ctx.ptr, When::After(TICK_MS), &TICK);
}

/// Forgets the parked read of `client` (its client timed out or went away); false when none.
pub fn unpark(client: usize) -> bool {
    PARKED.with(|t| {
        let mut t = t.borrow_mut();
        let before = t.parked.len();
        t.parked.retain(|p| p.client != client);
        t.parked.len() != before
    })
}

/// The tick, armed while a read is parked (a panic in it is a defect; it goes on).
static TICK: Job = Job::while_busy("read-handoff-timer", tick, parked, TICK_MS);

fn parked() -> bool {
    PARKED.with(|t| !t.borrow().parked.is_empty())
}

/// Resumes the parked reads whose handoff ended or whose bound passed.
fn tick(ctx: Ctx) {
    let now = ctx.now_ms();
    let due: Vec<Parked> = PARKED.with(|t| {
        let mut t = t.borrow_mut();
        let (due, parked) = std::mem::take(&mut t.parked).into_iter().partition(|p| {
            let w = &p.wait;
            w.deadline_ms <= now || (w.retry_at_ms <= now && !handing_off(&w.home))
        });
        t.parked = parked;
        due
    });
    // One fresh slot map per tick, however many reads a handoff's end wakes.
    let mut fresh = true;
    for p in due {
        let outcome = outcome(ctx, &p.wait.home, &mut fresh);
        if matches!(outcome, Outcome::Refused(_)) && handing_off(&p.wait.home) {
            metrics::WAITS_PAST_BOUND.incr();
        }
        (p.resume)(ctx, outcome);
    }
}

/// Where a read whose wait ended goes on; `fresh`: read the slot map afresh for a redirection
/// (then false: the map just read will do for the tick's other reads).
fn outcome(ctx: Ctx, home: &[u8], fresh: &mut bool) -> Outcome {
    if handing_off(home) {
        return Outcome::Refused(moving_error(home));
    }
    if cluster::routed_here(ctx.ptr, home) {
        return Outcome::Served;
    }
    Outcome::Refused(moved(ctx, home, fresh).unwrap_or_else(|| moving_error(home)))
}

/// The server's own redirection to the master the slot map names for `home`'s slot; None when
/// no other master with a known client address serves it.
fn moved(ctx: Ctx, home: &[u8], fresh: &mut bool) -> Option<CommandError> {
    let slot = key_slot(home);
    let topology = cluster::topology(ctx, std::mem::take(fresh)).ok()?;
    let owner = topology.remote_owner(slot).ok()??;
    let address = topology.client_address(&owner)?;
    let reply = format!("MOVED {slot} {}:{}", address.ip(), address.port());
    Some(CommandError(reply.into()))
}
