//! The one scheduler of the runtime: every module timer is made here, and every timer runs
//! through here.
//!
//! A timer runs a [`Job`]: the name its panic guard logs and `ctr.debug-panic-in` arms, and a
//! body that says when the job runs next ([`Next`]). The machines' ticks, their "run soon"
//! nudges and their one-shot deadlines are all jobs:
//! - [`arm`] runs a job once per call, with a word of data (a round's or a poll's id);
//! - [`arm_once`] arms a job only when it is not armed already (a tick, a nudge): it stays armed
//!   while its body answers [`Next::After`], and is free again once it answers [`Next::Done`].
//!
//! A panic in a body is contained by its guard (`crate::guard`); the job then goes on as its
//! `after_panic` says, so that a defect in one round never stops a machine's tick for good.
//! Timers live on the main thread only, as the server's own do.

use std::cell::Cell;
use std::ffi::c_void;

use redis_module::raw;

use crate::ffi::{rm, Ctx};
use crate::guard::guard;

/// When a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// In this iteration of the event loop, after the I/O it is handling: a timer due a second
    /// ago. Why not due now: the server fires module timers in due order and, when the next one
    /// is due within a millisecond, reschedules its handler a full millisecond ahead; a timer
    /// made due now while another is overdue waits behind it for that millisecond. One due in
    /// the past is first in line and makes the server fire its handler at once.
    Now,
    /// That many milliseconds from now (0: at the next timer pass).
    After(i64),
}

/// What a job's body asks for once it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing more: an [`arm_once`] job is free to be armed again.
    Done,
    /// Run again that many milliseconds from now (an [`arm_once`] job stays armed).
    After(i64),
}

/// A job timers run: a name and a body.
pub struct Job {
    /// The callback's name in the server log and in `ctr.debug-panic-in`.
    pub name: &'static str,
    body: Body,
    /// Set while an [`arm_once`] timer of this job is pending.
    armed: ArmedFlag,
}

enum Body {
    /// Given the timer's context and the word of data it was armed with, says what follows;
    /// when it panicked, the second function says it.
    Run(fn(Ctx, usize) -> Next, fn() -> Next),
    /// A machine's tick: runs every that many milliseconds for ever, a panic or not.
    Every(fn(Ctx), i64),
    /// A machine's tick while it has work: runs every that many milliseconds as long as the
    /// second function says so after a run, a panic or not.
    WhileBusy(fn(Ctx), fn() -> bool, i64),
    /// Runs once per arming.
    Once(fn(Ctx, usize)),
}

/// A job's "armed" flag. Timers, like every callback of the module, run on the server's main
/// thread; the flag is only ever touched there.
struct ArmedFlag(Cell<bool>);

// SAFETY: every job is a static the main thread alone uses (timers and commands run there).
unsafe impl Sync for ArmedFlag {}

impl Job {
    /// A job whose body says what follows it; `after_panic` says it when the body panicked.
    pub const fn new(
        name: &'static str,
        run: fn(Ctx, usize) -> Next,
        after_panic: fn() -> Next,
    ) -> Job {
        Job {
            name,
            body: Body::Run(run, after_panic),
            armed: ArmedFlag(Cell::new(false)),
        }
    }

    /// A tick: `tick` every `period_ms` once armed (with [`arm_once`]), for ever.
    pub const fn every(name: &'static str, tick: fn(Ctx), period_ms: i64) -> Job {
        Job {
            name,
            body: Body::Every(tick, period_ms),
            armed: ArmedFlag(Cell::new(false)),
        }
    }

    /// A tick: `tick` every `period_ms` once armed (with [`arm_once`]) while `busy` says so
    /// after a run; armed again by the machine when it has work again.
    pub const fn while_busy(
        name: &'static str,
        tick: fn(Ctx),
        busy: fn() -> bool,
        period_ms: i64,
    ) -> Job {
        Job {
            name,
            body: Body::WhileBusy(tick, busy, period_ms),
            armed: ArmedFlag(Cell::new(false)),
        }
    }

    /// A job run once per arming, given the word of data it was armed with.
    pub const fn once(name: &'static str, run: fn(Ctx, usize)) -> Job {
        Job {
            name,
            body: Body::Once(run),
            armed: ArmedFlag(Cell::new(false)),
        }
    }
}

/// A pending timer: its job, its data, and whether it holds the job's armed flag.
struct Pending {
    job: &'static Job,
    data: usize,
    once: bool,
}

/// Runs `job` with `data` when `when` says, once per call.
pub fn arm(ctx: *mut raw::RedisModuleCtx, when: When, job: &'static Job, data: usize) {
    create(
        ctx,
        when,
        Box::new(Pending {
            job,
            data,
            once: false,
        }),
    );
}

/// Runs `job` when `when` says unless it is armed already; false when it was.
pub fn arm_once(ctx: *mut raw::RedisModuleCtx, when: When, job: &'static Job) -> bool {
    if job.armed.0.replace(true) {
        return false;
    }
    create(
        ctx,
        when,
        Box::new(Pending {
            job,
            data: 0,
            once: true,
        }),
    );
    true
}

fn create(ctx: *mut raw::RedisModuleCtx, when: When, pending: Box<Pending>) {
    let after_ms = match when {
        When::Now => -1000,
        When::After(ms) => ms,
    };
    // SAFETY: ctx is a live context of this module; the timer owns the box until it fires
    // (module timers are never stopped here, so each fires exactly once).
    unsafe {
        rm!(RedisModule_CreateTimer)(
            ctx,
            after_ms,
            Some(on_timer),
            Box::into_raw(pending).cast::<c_void>(),
        )
    };
}

/// The one timer callback: runs the job's body under its guard, then arms it again or leaves
/// it free. An [`arm_once`] job is free while its body runs, so that a nudge from the body (or
/// from anything it calls) arms it again; when it was, the body's own [`Next::After`] is dropped,
/// and one timer of the job stays pending, never two.
unsafe extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: every timer of this module is made by `create`, with a boxed `Pending`.
    let pending = unsafe { Box::from_raw(data.cast::<Pending>()) };
    let job = pending.job;
    if pending.once {
        job.armed.0.set(false);
    }
    let ctx_ = Ctx { ptr: ctx };
    let next = match job.body {
        Body::Run(run, after_panic) => {
            guard(ctx, job.name, || run(ctx_, pending.data)).unwrap_or_else(after_panic)
        }
        Body::Every(tick, period_ms) => {
            guard(ctx, job.name, || tick(ctx_));
            Next::After(period_ms)
        }
        Body::WhileBusy(tick, busy, period_ms) => {
            guard(ctx, job.name, || tick(ctx_));
            match busy() {
                true => Next::After(period_ms),
                false => Next::Done,
            }
        }
        Body::Once(run) => {
            guard(ctx, job.name, || run(ctx_, pending.data));
            Next::Done
        }
    };
    match next {
        Next::After(_) if pending.once && job.armed.0.replace(true) => {}
        Next::After(ms) => create(ctx, When::After(ms), pending),
        Next::Done => {}
    }
}
