//! PNC.* command handlers: parse, run the PN-Counter core, reply, replicate, notify. Also the
//! server-event handlers that keep the deployment's replica id right across loads and
//! failovers (the id logic itself is `crate::pncounter::identity`).
//!
//! Replication: PNC.ADD and PNC.CLEAR depend on this deployment's replica id (a master
//! decision, possibly random). A write that stamps a key with the id in use replicates its
//! effect as one deterministic `PNC.APPLY key id generation delta`; a PNC.ADD to a key already
//! stamped with it replicates as sent, and its replay adds to the key's home slot (the stamp
//! is replicated state). PNC.MERGE, PNC.APPLY and PNC.SETSTATE are deterministic given their
//! arguments and the stored state, so they replicate verbatim. A command that changes nothing
//! replicates nothing.

use super::pnc_store::{check_arity, origin, read, replicate_apply, write, Origin, Outcome};
use crate::commands::parse::{integer, parse_i64};
use crate::ffi::{random_bytes, Args, CommandError, CommandResult, Ctx, Reply};
use crate::metrics::{PNC_MERGED_BYTES, PNC_MERGES, PNC_REFUSED_BLOBS};
use crate::persist::pnc_format;
use crate::pncounter::{identity, Home, PnCounter, PncError, ReplicaId};

impl From<PncError> for CommandError {
    fn from(e: PncError) -> Self {
        CommandError::fixed(e.message())
    }
}

fn invalid_state(reason: &str, blob: &[u8]) -> CommandError {
    PNC_REFUSED_BLOBS.incr();
    CommandError(format!("ERR invalid PNC state: {reason}{}", blob_hint(blob)).into())
}

/// What a refused blob most likely went through on its way here (a trailing newline after a
/// real state is named by the decoder itself).
fn blob_hint(blob: &[u8]) -> &'static str {
    if blob.trim_ascii().is_empty() {
        " (PNC.STATE of a missing key is nil, which a shell passes on as an empty line: there is nothing to merge)"
    } else {
        ""
    }
}

/// A replayed PNC.ADD names no slot: it is the master's add to the counter's home slot.
const NO_HOME_TO_REPLAY: CommandError = CommandError::fixed(
    "ERR PNC.ADD replayed on a PN-counter without a home record (the replicated stream and the data disagree)",
);

/// How a write reaches replicas and the AOF.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The command as sent: the counter's home record already names the slot it wrote, so
    /// every copy of the counter computes the same write from its own state.
    Verbatim,
    /// `PNC.APPLY key id generation delta`: the write (re)stamped the home record.
    Effect,
}

/// PNC.ADD key delta
///
/// A local add to a counter this deployment last wrote under the id in use (its home record is
/// the current one) replicates as sent: a replica or the AOF replaying it adds to the
/// counter's home slot, which is the same slot since the home record is part of the replicated
/// state. Any other local add (a new key, a key last written under another id, after a failover
/// or a change of `ctr.replica-id`), and any add while the key's slot moves by atomic slot
/// migration, stamps the key and replicates as `PNC.APPLY`.
pub fn add(ctx: Ctx, args: &Args) -> CommandResult {
    check_arity(args, 3, "pnc.add")?;
    if origin(ctx, "PNC.ADD")? == Origin::Replayed {
        return replay_add(ctx, args);
    }
    let mut ident = identity();
    let current = ident.local_home(random_bytes);
    let mut delta = 0;
    let outcome = write(ctx, args.raw(1), |c, existed| {
        delta = integer(args.bytes(2))?;
        super::pnc_bound::check_floor_allows(c, &current.id, delta)?;
        if c.home() == Some(current) {
            // The home record is set, so this always adds.
            let value = c.add_at_home(delta).ok_or(NO_HOME_TO_REPLAY)??;
            return Ok(Outcome {
                result: (value, Form::Verbatim),
                changed: delta != 0,
            });
        }
        let value = c.add(&current.id, delta)?;
        let changed = !existed || delta != 0;
        if changed {
            c.set_home(Some(current.clone()));
        }
        Ok(Outcome {
            result: (value, Form::Effect),
            changed,
        })
    })?;
    let (value, form) = outcome.result;
    // While the key's slot moves to another master (atomic slot migration), the write goes as
    // its effect too: Redis sends the slot's snapshot as RESTOREs, which drop the home record,
    // so the add replayed verbatim there would find no home slot (and be lost with an error
    // on the import's stream).
    let form =
        if form == Form::Verbatim && crate::runtime::slot_migration::moving_key(args.bytes(1)) {
            Form::Effect
        } else {
            form
        };
    // Only the effect needs the home, after the lock is released (a keyspace event handler may
    // run a PNC command).
    let stamped = (outcome.changed && form == Form::Effect).then(|| current.clone());
    drop(ident);
    if outcome.changed {
        match stamped {
            Some(home) => replicate_apply(ctx, args.raw(1), &home, delta),
            None => ctx.replicate_verbatim(),
        }
        ctx.key_changed(c"pnc.add", args.raw(1));
    }
    Ok(Reply::Integer(value))
}

/// PNC.ADD from our master or the AOF: the add to the counter's home slot that the master made.
fn replay_add(ctx: Ctx, args: &Args) -> CommandResult {
    let outcome = write(ctx, args.raw(1), |c, _| {
        let delta = integer(args.bytes(2))?;
        let value = c.add_at_home(delta).ok_or(NO_HOME_TO_REPLAY)??;
        Ok(Outcome {
            result: value,
            changed: delta != 0,
        })
    })?;
    if outcome.changed {
        ctx.replicate_verbatim();
        ctx.key_changed(c"pnc.add", args.raw(1));
    }
    Ok(Reply::Integer(outcome.result))
}

/// PNC.GET key
pub fn get(ctx: Ctx, args: &Args) -> CommandResult {
    check_arity(args, 2, "pnc.get")?;
    let value = read(ctx, args.raw(1), |c| c.map_or(0, PnCounter::value))?;
    Ok(Reply::Integer(value))
}

/// PNC.STATE key [SINCE version]
pub fn state(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() == 4 && args.bytes(2).eq_ignore_ascii_case(b"SINCE") {
        return super::pnc_delta::state_since(ctx, args);
    }
    if args.len() > 2 {
        return Err(super::parse::SYNTAX_ERROR);
    }
    check_arity(args, 2, "pnc.state")?;
    read(ctx, args.raw(1), |c| {
        c.map_or(Reply::Null, |c| Reply::Bulk(pnc_format::encode_state(c)))
    })
}

/// PNC.MERGE key state
pub fn merge(ctx: Ctx, args: &Args) -> CommandResult {
    check_arity(args, 3, "pnc.merge")?;
    let blob = args.bytes(2);
    let outcome = write(ctx, args.raw(1), |c, existed| {
        // Decoded once the key is known to be a PN-counter: WRONGTYPE comes first.
        let incoming = pnc_format::decode_state(blob).map_err(|e| invalid_state(&e.0, blob))?;
        let merged = c.merged(&incoming).map_err(|e| {
            PNC_REFUSED_BLOBS.incr();
            CommandError::from(e)
        })?;
        let changed = !existed || !merged.same_state(c);
        if changed {
            *c = merged;
        }
        Ok(Outcome {
            result: c.value(),
            changed,
        })
    })?;
    PNC_MERGES.incr();
    PNC_MERGED_BYTES.add(blob.len() as u64);
    if outcome.changed {
        ctx.replicate_verbatim();
        ctx.key_changed(c"pnc.merge", args.raw(1));
    }
    Ok(Reply::Integer(outcome.result))
}

/// PNC.CLEAR key
pub fn clear(ctx: Ctx, args: &Args) -> CommandResult {
    check_arity(args, 2, "pnc.clear")?;
    // Replayed or not, a clear carries its effect: PNC.CLEAR itself is never replicated.
    origin(ctx, "PNC.CLEAR")?;
    let home = identity().local_home(random_bytes).clone();
    let outcome = write(ctx, args.raw(1), |c, existed| {
        if !existed {
            return Ok(Outcome {
                result: 0,
                changed: false,
            });
        }
        if c.floor().is_some() {
            return Err(super::pnc_bound::CLEAR_UNDER_FLOOR);
        }
        let before = c.observed_reset(&home.id)?;
        let changed = before != 0;
        if changed {
            c.set_home(Some(home.clone()));
        }
        Ok(Outcome {
            result: before,
            changed,
        })
    })?;
    if outcome.changed {
        // observed_reset succeeded, so the negation fits.
        replicate_apply(ctx, args.raw(1), &home, outcome.result.wrapping_neg());
        ctx.key_changed(c"pnc.clear", args.raw(1));
    }
    Ok(Reply::Integer(outcome.result))
}

fn bulk_or_null(id: Option<&ReplicaId>) -> Reply {
    id.map_or(Reply::Null, |id| Reply::Bulk(id.as_bytes().to_vec()))
}

/// PNC.INFO key
pub fn info(ctx: Ctx, args: &Args) -> CommandResult {
    check_arity(args, 2, "pnc.info")?;
    let in_use = identity().current().map(|h| h.id.clone());
    let replica_id = bulk_or_null(in_use.as_ref());
    read(ctx, args.raw(1), |c| {
        let (value, home, replicas) = match c {
            None => (0, Reply::Null, Vec::new()),
            Some(c) => (
                c.value(),
                bulk_or_null(c.home().map(|h| &h.id)),
                c.entries()
                    .iter()
                    .map(|e| {
                        Reply::Map(vec![
                            ("id", Reply::Bulk(e.id.as_bytes().to_vec())),
                            // P and N are at most i64::MAX (the safe range).
                            ("p", Reply::Integer(i64::try_from(e.p).unwrap_or(i64::MAX))),
                            ("n", Reply::Integer(i64::try_from(e.n).unwrap_or(i64::MAX))),
                        ])
                    })
                    .collect(),
            ),
        };
        let mut fields = vec![
            ("value", Reply::Integer(value)),
            ("replica-id", replica_id),
            ("home", home),
            ("replicas", Reply::Array(replicas)),
        ];
        if let Some(c) = c.filter(|c| c.bound().is_some()) {
            fields.extend(super::pnc_bound::info_fields(
                c,
                in_use.as_ref(),
                args.bytes(1),
            ));
        }
        Reply::Map(fields)
    })
}

/// PNC.APPLY key id generation delta (internal: the replicated effect of PNC.ADD/PNC.CLEAR).
pub fn apply(ctx: Ctx, args: &Args) -> CommandResult {
    super::ctr_internal::refuse_client_call(ctx, "PNC.APPLY")?;
    if args.len() != 5 && args.len() != 9 {
        return Err(crate::commands::wrong_arity("pnc.apply"));
    }
    let token = super::pnc_bound::applied_token(args)?;
    let id = ReplicaId::parse(args.bytes(2))
        .map_err(|e| CommandError(format!("ERR invalid replica id: {e}").into()))?;
    let gen = parse_i64(args.bytes(3))
        .filter(|g| *g > 0)
        .and_then(|g| u64::try_from(g).ok())
        .ok_or(CommandError::fixed(
            "ERR invalid replica id generation (a positive integer)",
        ))?;
    let delta = integer(args.bytes(4))?;
    let home = Home { id, gen };
    let outcome = write(ctx, args.raw(1), |c, _| {
        let value = c.add(&home.id, delta)?;
        c.set_home(Some(home.clone()));
        if let Some(record) = token {
            c.record_token(record.entry(value));
        }
        Ok(Outcome {
            result: value,
            changed: true,
        })
    })?;
    observe_if_ours(ctx, &home);
    ctx.replicate_verbatim();
    ctx.key_changed(c"pnc.apply", args.raw(1));
    Ok(Reply::Integer(outcome.result))
}

/// A stamp that an internal command carries is this deployment's own when it is replayed from
/// its own AOF or its master's stream (a replica follows its master's stamps): then it tells
/// which id is in use. On a primary that is not loading it comes from elsewhere (an atomic slot
/// import replays what the slots' source master wrote, under the source's id), and, like a
/// `RESTORE`d value's, it must never make this master adopt another master's id.
fn observe_if_ours(ctx: Ctx, home: &Home) {
    let ours = redis_module::raw::REDISMODULE_CTX_FLAGS_LOADING
        | redis_module::raw::REDISMODULE_CTX_FLAGS_SLAVE;
    if ctx.flags() & ours != 0 {
        identity().observe(home);
    }
}

/// PNC.SETSTATE key stored-state (internal: what the AOF rewrite emits).
pub fn setstate(ctx: Ctx, args: &Args) -> CommandResult {
    super::ctr_internal::refuse_client_call(ctx, "PNC.SETSTATE")?;
    check_arity(args, 3, "pnc.setstate")?;
    let decoded =
        pnc_format::decode_stored(args.bytes(2)).map_err(|e| invalid_state(&e.0, args.bytes(2)))?;
    let home = decoded.home().cloned();
    write(ctx, args.raw(1), |c, _| {
        *c = decoded;
        Ok(Outcome {
            result: (),
            changed: true,
        })
    })?;
    if let Some(home) = home {
        observe_if_ours(ctx, &home);
    }
    ctx.replicate_verbatim();
    ctx.key_changed(c"pnc.setstate", args.raw(1));
    Ok(Reply::Ok)
}

#[cfg(all(feature = "module", not(test)))]
mod events {
    use std::sync::atomic::Ordering::Relaxed;

    use redis_module::server_events::{LoadingSubevent, ServerRole};
    use redis_module::Context;
    use redis_module_macros::{loading_event_handler, role_changed_event_handler};

    use crate::ffi::{random_bytes, Ctx};
    use crate::persist::pnc_type::DATASET_LOADING;
    use crate::pncounter::identity;

    #[loading_event_handler]
    fn on_loading(_ctx: &Context, event: LoadingSubevent) {
        let loading = matches!(
            event,
            LoadingSubevent::RdbStarted
                | LoadingSubevent::AofStarted
                | LoadingSubevent::ReplStarted
        );
        DATASET_LOADING.store(loading, Relaxed);
        crate::ffi::forget_role();
        crate::runtime::listing_gate::took_over();
    }

    #[role_changed_event_handler]
    fn on_role_changed(ctx: &Context, role: ServerRole) {
        crate::ffi::forget_role();
        crate::runtime::listing_gate::took_over();
        let ctx = Ctx { ptr: ctx.ctx };
        match role {
            ServerRole::Primary => {
                let home = identity().promote(random_bytes());
                ctx.log_warning(&format!(
                    "ctr: this server became a primary; PN-counter writes now go to the fresh \
                     replica id {} (generation {})",
                    home.id, home.gen
                ));
            }
            ServerRole::Replica => identity().demote(),
        }
    }
}
