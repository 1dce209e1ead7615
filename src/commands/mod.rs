//! The command table: every command's name, handler, flags, key positions, arity and docs, in
//! one place. Registration and `COMMAND INFO` metadata are both derived from it.

// Raw pointers here come from Redis itself (contexts, argv, keys), never from clients.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod acl_categories;
pub mod ctr;
pub mod ctr_args;
pub mod ctr_bounds;
pub mod ctr_floor;
mod ctr_gather;
pub mod ctr_internal;
pub mod ctr_limits;
mod ctr_orphans;
pub mod ctr_reconcile;
pub mod ctr_spread;
pub mod parse;
pub mod pnc;
pub mod pnc_bound;
pub mod pnc_delta;
mod pnc_store;
mod reconcile_write;
mod spread_clear;
pub mod spread_holders;
mod spread_reconcile;
mod ttl;

use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use crate::ffi::{rm, Args, CommandError, CommandResult, Ctx, RawString, Reply};

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
pub const NO_KEYS: KeyRange = KeyRange {
    first: 0,
    last: 0,
    step: 0,
};
pub const ALL_KEYS: KeyRange = KeyRange {
    first: 1,
    last: -1,
    step: 1,
};

/// A key that is there only when a keyword stands at a fixed position: the source of
/// `CTR.RECONCILE key FROM STREAM source` is argument 4 when argument 2 is `FROM` (any case).
///
/// No key spec can say that (a keyword spec finds the first matching word anywhere, so a source
/// key named `stream` would shift it), so a command with keyword keys is flagged `getkeys-api`
/// and the dispatcher answers the server's key-position requests from this table. Redis 7.0
/// also routes cluster commands by that answer (`getKeysFromCommand`), never by key specs: a key
/// declared only in a spec would be invisible to its CROSSSLOT and ASK/TRYAGAIN checks.
#[derive(Clone, Copy, Debug)]
pub struct KeywordKey {
    pub keyword: &'static CStr,
    /// The argument that must be the keyword.
    pub at: c_int,
    /// How many arguments after the keyword the key is.
    pub offset: c_int,
    pub access: KeyAccess,
}

impl KeywordKey {
    /// The key's argument index in `argv` (argv[0] is the command name), if present.
    pub fn position(&self, argv: &[&[u8]]) -> Option<usize> {
        let at = usize::try_from(self.at).ok()?;
        let pos = at.checked_add(usize::try_from(self.offset).ok()?)?;
        let word = argv.get(at)?;
        (pos < argv.len() && word.eq_ignore_ascii_case(self.keyword.to_bytes())).then_some(pos)
    }
}

pub struct CommandDef {
    pub name: &'static CStr,
    pub entry: raw::RedisModuleCmdFunc,
    pub flags: &'static CStr,
    pub keys: KeyRange,
    pub access: KeyAccess,
    /// Keys that follow a keyword, each declared as its own key spec.
    pub keyword_keys: &'static [KeywordKey],
    /// Redis arity: positive = exact argument count, negative = at least that many.
    pub arity: c_int,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub since: &'static CStr,
}

/// The commands that carry state the master already decided (replication effects, the AOF
/// rewrite's full states). Where the server knows the `internal` command flag (Redis 8.0+),
/// they are registered with it: ordinary clients cannot forge state with them, while the
/// replication link and AOF loading still run them.
pub const INTERNAL_COMMANDS: [&CStr; 5] = [
    c"ctr.apply",
    c"ctr.step",
    c"ctr.setstate",
    c"pnc.apply",
    c"pnc.setstate",
];

impl CommandDef {
    pub fn is_internal(&self) -> bool {
        INTERNAL_COMMANDS.contains(&self.name)
    }
}

/// How the internal commands were registered, for `INFO ctr` and the docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InternalCommands {
    /// With the server's `internal` flag: unknown to ordinary clients.
    Hidden,
    /// As ordinary commands: the server has no `internal` flag, or `ctr.expose-internal-commands`
    /// asked for them.
    Visible,
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
        keyword_keys: &[],
        arity: -3,
        summary: c"Adds a delta to a counter and returns the new value; creates it at 0 when missing. Options: TOKEN (idempotent retries), AT (event time), EX/PX (TTL on create).",
        complexity: c"O(1), O(log N) with a token where N is the number of tokens remembered",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"ctr.get",
        entry: entry!(ctr::get),
        flags: c"readonly",
        keys: SINGLE_KEY,
        access: KeyAccess::Read,
        keyword_keys: &[],
        arity: 2,
        summary: c"Returns the value of a counter (0 when missing).",
        complexity: c"O(1) for a counter; O(H) for a spread counter of H holders, gathered from every master (blocks up to ctr.gather-timeout-ms)",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"ctr.mget",
        entry: entry!(ctr::mget),
        flags: c"readonly",
        keys: ALL_KEYS,
        access: KeyAccess::Read,
        keyword_keys: &[],
        arity: -2,
        summary: c"Returns the values of several counters (0 for a missing one).",
        complexity: c"O(N) where N is the number of keys; plus O(H) for the spread counters among them, H their holders in all, gathered from every master (blocks up to ctr.gather-timeout-ms)",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"ctr.clear",
        entry: entry!(ctr::clear),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -2,
        summary: c"Resets a counter to 0 keeping its settings, and returns the value before. Option: TOKEN.",
        complexity: c"O(N) where N is the number of shards; O(H) for a spread counter's home of H holders, gathered from every master (blocks up to ctr.gather-timeout-ms)",
        since: c"0.2.0",
    },
    CommandDef {
        name: c"ctr.info",
        entry: entry!(ctr::info),
        flags: c"readonly",
        keys: SINGLE_KEY,
        access: KeyAccess::Read,
        keyword_keys: &[],
        arity: 2,
        summary: c"Describes a counter: value, shards, add rate, tokens remembered, duplicates ignored.",
        complexity: c"O(N + L) where N is the number of shards and L the ledger entries (counted by kind); plus O(H) for a spread counter of H holders, gathered from every master (blocks up to ctr.gather-timeout-ms)",
        since: c"0.2.0",
    },
    CommandDef {
        name: c"ctr.floor",
        entry: entry!(ctr_floor::floor),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 3,
        summary: c"Sets (or with NONE removes) the floor a counter can never go below; creates it at 0 when missing.",
        complexity: c"O(N) where N is the number of shards",
        since: c"0.3.0",
    },
    CommandDef {
        name: c"ctr.decrfloor",
        entry: entry!(ctr_floor::decrfloor),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -3,
        summary: c"Decrements only if the result stays at or above the floor; nil when refused. TOKEN replays the first outcome to retries.",
        complexity: c"O(N) where N is the number of shards, plus O(log T) with a token",
        since: c"0.3.0",
    },
    CommandDef {
        name: c"ctr.ceil",
        entry: entry!(ctr_bounds::ceil),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 3,
        summary: c"Sets (or with NONE removes) the ceiling a counter can never go above; creates it at 0 when missing.",
        complexity: c"O(N) where N is the number of shards",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"ctr.increx",
        entry: entry!(ctr_bounds::increx),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -2,
        summary: c"Redis 8.8's INCREX on a counter: adds BYINT (1 by default) within LBOUND/UBOUND and the counter's floor and ceiling, skipping (or with SATURATE clamping) a result outside them, sets EX/PX/EXAT/PXAT/PERSIST (ENX: only without a TTL), and replies [new value, applied increment]. TOKEN replays the first reply.",
        complexity: c"O(1), O(N) on a counter of N shards with a floor or ceiling, plus O(log T) with a token",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"ctr.refund",
        entry: entry!(ctr_bounds::refund),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 4,
        summary: c"Gives back, once, what a tokened CTR.DECRFLOOR (or negative CTR.ADD) took, up to the ceiling; replies the units returned (the same on a retry), nil when the token has no grant in the window.",
        complexity: c"O(N) where N is the number of shards, plus O(log T)",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"ctr.reconcile",
        entry: entry!(ctr_reconcile::reconcile),
        flags: c"write deny-oom getkeys-api",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        // FROM STREAM|ZSET|SET source: the source is read, in the counter's slot.
        keyword_keys: &[KeywordKey { keyword: c"FROM", at: 2, offset: 2, access: KeyAccess::Read }],
        arity: -3,
        summary: c"Repairs a counter from its source of truth at a watermark (a number, or counted FROM a STREAM, ZSET or SET); replies [value, drift]. START makes it keep the buckets that need, and replies the earliest watermark it accepts.",
        complexity: c"O(B) where B is the number of buckets kept, plus counting the source: O(entries after the watermark) for a stream, O(log N) for a sorted set, O(1) for a set",
        since: c"0.4.0",
    },
    CommandDef {
        name: c"ctr.throttle",
        entry: entry!(ctr_limits::throttle),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -5,
        summary: c"GCRA rate limiter with redis-cell's CL.THROTTLE reply: [limited, limit, remaining, retry_after, reset_after]. Quantity 0 reads; TOKEN replays a retry's first reply; AT sets the clock.",
        complexity: c"O(1), O(log N) with a token where N is the number of tokens remembered",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"ctr.window",
        entry: entry!(ctr_limits::window),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -3,
        summary: c"Gives a counter a sliding window (or with NONE removes it): its value is then the sum of what was added in the last window-ms, exact to window-ms / BUCKETS (10 by default); creates it at 0 when missing.",
        complexity: c"O(N) where N is the number of shards",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"ctr.spread",
        entry: entry!(ctr_spread::spread),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 3,
        summary: c"Makes a counter a spread counter of N holders (the key is holder 0; the others hash to their own slots, spread evenly over the masters) and returns every holder's name.",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.5.0",
    },
    CommandDef {
        name: c"ctr.holders",
        entry: entry!(spread_holders::holders),
        flags: c"readonly fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Read,
        keyword_keys: &[],
        arity: -2,
        summary: c"Returns the holder names of a spread counter, the key first, as CTR.SPREAD replies them ([key] when it is not spread), from the key's master alone: no gather. With AT ms, the holders in force at that time (the list a purchase of that time walks).",
        complexity: c"O(N) where N is the number of holders",
        since: c"0.6.0",
    },
    CommandDef {
        name: c"ctr.orphans",
        entry: entry!(ctr_orphans::orphans_command),
        // No keys: it lists and deletes this master's holders the orphan audit reported,
        // whatever their slots (each deleted through the server's routing check).
        flags: c"write admin",
        keys: NO_KEYS,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -1,
        summary: c"Lists the spreads whose holders on this master the orphan audit reports as orphans (their home not found), or deletes one spread's reported holders here (DELETE spread-id): an operator's order, never the audit's.",
        complexity: c"O(N) where N is the number of reported holders on this node",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"ctr.gather",
        entry: entry!(ctr_gather::answer_link_request),
        // No keys: the holders it reads may sit in any slot this master serves, each read
        // through the server's routing check and the caller's ACL rights.
        flags: c"readonly",
        keys: NO_KEYS,
        access: KeyAccess::Read,
        keyword_keys: &[],
        arity: 2,
        summary: c"Answers a gather request of another node's spread counter read (module to module: sent on the read links of ctr.read-links).",
        complexity: c"O(H) where H is the number of holders the request names",
        since: c"0.7.0",
    },
    CommandDef {
        name: c"ctr.apply",
        entry: entry!(ctr_internal::apply),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 3,
        summary: c"Internal: applies a write effect replicated by a master (time, shard, token already decided).",
        complexity: c"O(log N) where N is the number of tokens remembered",
        since: c"0.2.0",
    },
    CommandDef {
        name: c"ctr.step",
        entry: entry!(ctr_internal::step),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 3,
        summary: c"Internal: replays a transfer or fold step replicated by a master (a move, shrink, seal, credit or answer, with the time and ids it drew).",
        complexity: c"O(N) where N is the number of transfer entries and holders of the key",
        since: c"0.7.0",
    },
    CommandDef {
        name: c"ctr.setstate",
        entry: entry!(ctr_internal::setstate),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Overwrite,
        keyword_keys: &[],
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
        keyword_keys: &[],
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
        keyword_keys: &[],
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
        keyword_keys: &[],
        arity: -2,
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
        keyword_keys: &[],
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
        keyword_keys: &[],
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
        keyword_keys: &[],
        arity: 2,
        summary: c"Returns a PN-counter's value, this deployment's replica id and every slot.",
        complexity: c"O(R) where R is the number of replica ids in the counter",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.floor",
        entry: entry!(pnc_bound::floor),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 3,
        summary: c"Sets, moves or removes the floor of a PN-counter's sum over every deployment.",
        complexity: c"O(R) where R is the number of replica ids and transfers in the counter",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"pnc.decrfloor",
        entry: entry!(pnc_bound::decrfloor),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -3,
        summary: c"Decrements a PN-counter from this deployment's rights only; nil when they do not cover it.",
        complexity: c"O(R + T) where R is the number of replica ids and transfers, T the tokens remembered",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"pnc.give",
        entry: entry!(pnc_bound::give),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: 4,
        summary: c"Moves decrement rights of a floored PN-counter from this deployment to another.",
        complexity: c"O(R) where R is the number of replica ids and transfers in the counter",
        since: c"0.8.0",
    },
    CommandDef {
        name: c"pnc.apply",
        entry: entry!(pnc::apply),
        flags: c"write deny-oom fast",
        keys: SINGLE_KEY,
        access: KeyAccess::Update,
        keyword_keys: &[],
        arity: -5,
        summary: c"Internal: the replicated effect of PNC.ADD, PNC.CLEAR and PNC.DECRFLOOR on one replica id.",
        complexity: c"O(log R) where R is the number of replica ids in the counter",
        since: c"0.1.0",
    },
    CommandDef {
        name: c"pnc.setstate",
        entry: entry!(pnc::setstate),
        flags: c"write deny-oom",
        keys: SINGLE_KEY,
        access: KeyAccess::Overwrite,
        keyword_keys: &[],
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
/// abort the server (a panic is still a defect: the message says so). Generic over the handler
/// so that each command's entry point calls its handler directly (no call through a pointer).
#[inline(always)]
pub fn dispatch<H>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut RawString,
    argc: c_int,
    handler: H,
) -> c_int
where
    H: FnOnce(Ctx, &Args) -> CommandResult,
{
    // SAFETY: Redis passes argc live argument strings for the duration of the call.
    let args = unsafe { Args::new(argv, argc) };
    // Only commands flagged `getkeys-api` are ever called this way: the server asks where the
    // keys are (cluster routing, COMMAND GETKEYS, ACL); nothing runs and nothing is replied.
    // SAFETY: ctx is the live context of this call.
    if unsafe { rm!(RedisModule_IsKeysPositionRequest)(ctx) } != 0 {
        declare_key_positions(ctx, &args);
        return raw::REDISMODULE_OK as c_int;
    }
    let ctx = Ctx { ptr: ctx };
    let result = catch_unwind(AssertUnwindSafe(|| handler(ctx, &args)));
    // The common reply, sent without walking a reply tree, and without the (out-of-line,
    // recursive) drop glue of one: an integer owns nothing.
    if let Ok(Ok(Reply::Integer(v))) = result {
        ctx.reply_integer(v);
        std::mem::forget(result);
        return raw::REDISMODULE_OK as c_int;
    }
    match result {
        Ok(Ok(reply)) => ctx.reply(&reply),
        Ok(Err(err)) => ctx.reply_error(&err),
        Err(payload) => {
            let name = if args.is_empty() {
                std::borrow::Cow::Borrowed("")
            } else {
                String::from_utf8_lossy(args.bytes(0))
            };
            crate::guard::log_panic(ctx.ptr, &format!("command {name}"), payload.as_ref());
            ctx.reply_error(&crate::ffi::INTERNAL_ERROR)
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// The argument indexes of a command's keys, with their key-spec flags, as the command table
/// declares them: the range keys, then the keyword keys that are present.
pub fn key_positions(def: &CommandDef, argv: &[&[u8]]) -> Vec<(usize, KeyAccess)> {
    let argc = argv.len() as c_int;
    let last = if def.keys.last < 0 {
        argc + def.keys.last
    } else {
        def.keys.last.min(argc - 1)
    };
    let step = def.keys.step.max(1);
    let mut keys: Vec<(usize, KeyAccess)> = (def.keys.first..=last)
        .step_by(step as usize)
        .filter(|&i| i >= 1)
        .map(|i| (i as usize, def.access))
        .collect();
    keys.extend(
        def.keyword_keys
            .iter()
            .filter_map(|k| k.position(argv).map(|pos| (pos, k.access))),
    );
    keys
}

/// Answers a key-position request for the command named by argv[0].
fn declare_key_positions(ctx: *mut raw::RedisModuleCtx, args: &Args) {
    if args.is_empty() {
        return;
    }
    let name = args.bytes(0);
    let Some(def) = COMMANDS
        .iter()
        .find(|d| d.name.to_bytes().eq_ignore_ascii_case(name))
    else {
        return;
    };
    args.with_words(0, |argv| {
        for (pos, access) in key_positions(def, argv) {
            // SAFETY: ctx is live and in a key-position request; pos < argc.
            unsafe {
                rm!(RedisModule_KeyAtPosWithFlags)(
                    ctx,
                    pos as c_int,
                    crate::command_info::key_flags(access) as c_int,
                )
            };
        }
    });
}

/// Creates every command and sets its COMMAND INFO metadata. With `hide_internal`, the
/// internal commands get the server's `internal` flag where it has one (a server that does not
/// know the flag refuses the command, which is then created without it). Returns how they were
/// registered.
pub fn register(
    ctx: *mut raw::RedisModuleCtx,
    hide_internal: bool,
) -> Result<InternalCommands, String> {
    let mut internal = InternalCommands::Visible;
    for def in COMMANDS {
        let getkeys = def
            .flags
            .to_bytes()
            .split(|&b| b == b' ')
            .any(|f| f == b"getkeys-api");
        let has_keyword_keys = !def.keyword_keys.is_empty();
        if getkeys != has_keyword_keys {
            return Err(format!(
                "{:?}: keyword keys and the getkeys-api flag go together",
                def.name
            ));
        }
        let hidden = hide_internal && def.is_internal() && create_command(ctx, def, c" internal");
        if hidden {
            internal = InternalCommands::Hidden;
        } else if !create_command(ctx, def, c"") {
            return Err(format!("could not create command {:?}", def.name));
        }
        crate::command_info::set(ctx, def)?;
    }
    acl_categories::set_all(ctx, COMMANDS);
    crate::runtime::register(ctx);
    Ok(internal)
}

/// One RedisModule_CreateCommand with the table's flags plus `extra_flags`; false when the
/// server refuses it (e.g. a flag it does not know).
fn create_command(ctx: *mut raw::RedisModuleCtx, def: &CommandDef, extra_flags: &CStr) -> bool {
    let mut flags = def.flags.to_bytes().to_vec();
    flags.extend_from_slice(extra_flags.to_bytes());
    let Ok(flags) = std::ffi::CString::new(flags) else {
        return false;
    };
    // SAFETY: called from OnLoad with a live context; all strings are NUL-terminated.
    let status = unsafe {
        rm!(RedisModule_CreateCommand)(
            ctx,
            def.name.as_ptr(),
            def.entry,
            flags.as_ptr(),
            def.keys.first,
            def.keys.last,
            def.keys.step,
        )
    };
    status == raw::REDISMODULE_OK as c_int
}
