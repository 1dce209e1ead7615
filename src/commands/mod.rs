//! The command table: every command's name, handler, flags, key positions, arity and docs, in
//! one place. Registration and `COMMAND INFO` metadata are both derived from it.

// Raw pointers here come from Redis itself (contexts, argv, keys), never from clients.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod ctr;
pub mod parse;
pub mod pnc;

use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use crate::ffi::{rm, Args, CommandError, CommandResult, Ctx, RawString};

pub type Handler = fn(Ctx, &Args) -> CommandResult;

/// How a command touches its keys (becomes the key spec flags).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KeyAccess {
    /// Reads the value.
    Read,
    /// Reads and updates the value, creating it when missing (like INCRBY).
    Update,
    /// Replaces the value without reading it.
    Overwrite,
}

/// Where the keys are: `first..=last` (negative = from the end) every `step` arguments.
#[derive(Clone, Copy, Debug)]
pub struct KeyRange {
    pub first: c_int,
    pub last: c_int,
    pub step: c_int,
}

pub const SINGLE_KEY: KeyRange = KeyRange {
    first: 1,
    last: 1,
    step: 1,
};
pub const ALL_KEYS: KeyRange = KeyRange {
    first: 1,
    last: -1,
    step: 1,
};

pub struct CommandDef {
    pub name: &'static CStr,
    pub entry: raw::RedisModuleCmdFunc,
    pub flags: &'static CStr,
    pub keys: KeyRange,
    pub access: KeyAccess,
    /// Redis arity: positive = exact argument count, negative = at least that many.
    pub arity: c_int,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub since: &'static CStr,
}

/// Turns a handler into the `extern "C"` entry point Redis calls.
macro_rules! entry {
    ($handler:path) => {{
        unsafe extern "C" fn entry(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut $crate::ffi::RawString,
            argc: std::ffi::c_int,
        ) -> std::ffi::c_int {
            $crate::commands::dispatch(ctx, argv, argc, $handler)
        }
        Some(entry as _)
    }};
}

pub static COMMANDS: &[CommandDef] = &[
    CommandDef {
        name: c"ctr.add",
        entry: entry!(ctr::add),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        arity: 3,
        summary:
            c"Adds a delta to a counter and returns the new value; creates it at 0 when missing.",
        complexity: c"O(1)",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"ctr.get",
        entry: entry!(ctr::get),
        flags: c"readonly fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Read,
        arity: 2,
        summary: c"Returns the value of a counter (0 when missing).",
        complexity: c"O(1)",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"ctr.mget",
        entry: entry!(ctr::mget),
        flags: c"readonly fast",
        keys: ALL_KEYS,
        access: KeyAccess::Read,
        arity: -2,
        summary: c"Returns the values of several counters (0 for a missing one).",
        complexity: c"O(N) where N is the number of keys",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"ctr.setstate",
        entry: entry!(ctr::setstate),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Overwrite,
        arity: 3,
        summary: c"Internal: replaces a counter with a serialized state (used by AOF rewrite).",
        complexity: c"O(N) where N is the size of the state",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.add",
        entry: entry!(pnc::add),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        arity: 3,
        summary:
            c"Adds a delta to this deployment's slot of a PN-counter and returns the new value.",
        complexity: c"O(log R) where R is the number of replica ids in the counter",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.get",
        entry: entry!(pnc::get),
        flags: c"readonly fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Read,
        arity: 2,
        summary: c"Returns the value of a PN-counter (0 when missing).",
        complexity: c"O(1)",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.state",
        entry: entry!(pnc::state),
        flags: c"readonly",
        keys: SINGLE_KEY,
        access: KeyAccess::Read,
        arity: 2,
        summary: c"Returns the versioned binary state of a PN-counter, for PNC.MERGE elsewhere.",
        complexity: c"O(R) where R is the number of replica ids in the counter",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.merge",
        entry: entry!(pnc::merge),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        arity: 3,
        summary: c"Merges a PNC.STATE blob into a PN-counter (creating it) and returns the value.",
        complexity: c"O(R) where R is the number of replica ids in both states",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.clear",
        entry: entry!(pnc::clear),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        arity: 2,
        summary: c"Observed reset of a PN-counter; returns the value before the reset.",
        complexity: c"O(log R) where R is the number of replica ids in the counter",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.info",
        entry: entry!(pnc::info),
        flags: c"readonly",
        keys: SINGLE_KEY,
        access: KeyAccess::Read,
        arity: 2,
        summary: c"Returns a PN-counter's value, this deployment's replica id and every slot.",
        complexity: c"O(R) where R is the number of replica ids in the counter",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.apply",
        entry: entry!(pnc::apply),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        arity: 5,
        summary: c"Internal: the replicated effect of PNC.ADD and PNC.CLEAR on one replica id.",
        complexity: c"O(log R) where R is the number of replica ids in the counter",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.setstate",
        entry: entry!(pnc::setstate),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Overwrite,
        arity: 3,
        summary: c"Internal: replaces a PN-counter with a stored state (used by AOF rewrite).",
        complexity: c"O(R) where R is the number of replica ids in the state",
        since: c"0.1.0",
    },
];

pub fn wrong_arity(name: &str) -> CommandError {
    CommandError(format!("ERR wrong number of arguments for '{name}' command").into())
}

/// Runs a handler, sends its reply, and turns a panic into an error reply instead of letting it
/// abort the server (a panic is still a defect: the message says so).
pub fn dispatch(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut RawString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let ctx = Ctx { ptr: ctx };
    // SAFETY: Redis passes argc live argument strings for the duration of the call.
    let args = unsafe { Args::new(argv, argc) };
    match catch_unwind(AssertUnwindSafe(|| handler(ctx, &args))) {
        Ok(Ok(reply)) => ctx.reply(&reply),
        Ok(Err(err)) => ctx.reply_error(&err),
        Err(_) => ctx.reply_error(&CommandError::fixed(
            "ERR internal error in redis-ctr (a bug: please report it)",
        )),
    }
    raw::REDISMODULE_OK as c_int
}

/// Creates every command and sets its COMMAND INFO metadata.
pub fn register(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    for def in COMMANDS {
        // SAFETY: called from OnLoad with a live context; all strings are NUL-terminated statics.
        let status = unsafe {
            rm!(RedisModule_CreateCommand)(
                ctx,
                def.name.as_ptr(),
                def.entry,
                def.flags.as_ptr(),
                def.keys.first,
                def.keys.last,
                def.keys.step,
            )
        };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(format!("could not create command {:?}", def.name));
        }
        crate::command_info::set(ctx, def)?;
    }
    Ok(())
}
