//! The bounded PN-counter's commands (issue 36): `PNC.FLOOR`, `PNC.DECRFLOOR`, `PNC.GIVE`, and
//! the checks the other PNC commands make once a floor is in force. The rules (rights, floor
//! moves, the transfer matrix) are `crate::pncounter::bound`; this file parses, runs them on
//! the key, replies and replicates.
//!
//! Replication: a granted `PNC.DECRFLOOR` goes as its effect `PNC.APPLY key id generation
//! -amount`, with `TOKEN token amount 1|0` when it carried a token (the record a retry
//! replays, also for a refusal); `PNC.FLOOR` and `PNC.GIVE` (rare, decided on the master's id
//! and rights) go as `PNC.SETSTATE key <stored form>`, the exact state they left.

use super::ctr_args::{parse_decrement, parse_floor, AMOUNT_NOT_POSITIVE};
use super::parse::{integer, SYNTAX_ERROR};
use super::pnc_store::{check_arity, origin, replicate_apply_with, write, Origin, Outcome};
use crate::ffi::{random_bytes, Args, CommandError, CommandResult, Ctx, RawString, Reply};
use crate::metrics::{PNC_DECR_GRANTED, PNC_DECR_REFUSED};
use crate::persist::pnc_format;
use crate::pncounter::{identity, BoundError, Decrement, Home, LedgerEntry, PnCounter, ReplicaId};
use crate::runtime::ctr_store::TOKEN_REUSED;
use crate::runtime::pnc_refusals;

/// The internal command that carries the exact state PNC.FLOOR and PNC.GIVE leave.
const SETSTATE_COMMAND: &std::ffi::CStr = c"PNC.SETSTATE";

pub const CLEAR_UNDER_FLOOR: CommandError = CommandError::fixed(
    "ERR PNC.CLEAR of a floored PN-counter (remove its floor with PNC.FLOOR key NONE first)",
);

impl From<BoundError> for CommandError {
    fn from(e: BoundError) -> Self {
        CommandError::fixed(e.message())
    }
}

/// A plain `PNC.ADD` under a floor in force may only decrement what this deployment's rights
/// cover (else the floor could be crossed without `PNC.DECRFLOOR`).
pub fn check_floor_allows(c: &PnCounter, id: &ReplicaId, delta: i64) -> Result<(), CommandError> {
    if delta >= 0 {
        return Ok(());
    }
    let amount = delta.checked_neg().ok_or(BoundError::Overflow)?;
    if c.may_decrement(id, amount) {
        Ok(())
    } else {
        Err(BoundError::NotEnoughRights.into())
    }
}

/// The extra `PNC.INFO` fields of a bounded counter.
pub fn info_fields(
    c: &PnCounter,
    in_use: Option<&ReplicaId>,
    key: &[u8],
) -> Vec<(&'static str, Reply)> {
    let rights = in_use.map_or(0, |id| c.rights(id));
    let refused = pnc_refusals::units(key);
    vec![
        ("floor", c.floor().map_or(Reply::Null, Reply::Integer)),
        ("floor-level", Reply::Integer(c.floor_level())),
        ("rights", Reply::Integer(clamp(rights))),
        (
            "refused",
            Reply::Integer(i64::try_from(refused).unwrap_or(i64::MAX)),
        ),
    ]
}

fn clamp(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v > 0 { i64::MAX } else { i64::MIN })
}

/// A local write's id, or the refusal a replica gives (these commands are never replayed:
/// their effects are `PNC.APPLY`/`PNC.SETSTATE`).
fn local_home(ctx: Ctx, name: &str) -> Result<Home, CommandError> {
    match origin(ctx, name)? {
        Origin::Local => Ok(identity().local_home(random_bytes).clone()),
        Origin::Replayed => Err(CommandError(
            format!("ERR {name} is replicated as its effect and never replayed").into(),
        )),
    }
}

fn replicate_state(ctx: Ctx, key: RawString, stored: &[u8]) {
    if !ctx.replicate_effect(SETSTATE_COMMAND, key, stored) {
        ctx.log_warning("ctr: the server refused to replicate PNC.SETSTATE");
    }
}

/// PNC.FLOOR key floor | NONE
pub fn floor(ctx: Ctx, args: &Args) -> CommandResult {
    check_arity(args, 3, "pnc.floor")?;
    let target = parse_floor(args.bytes(2))?;
    let home = local_home(ctx, "PNC.FLOOR")?;
    let outcome = write(ctx, args.raw(1), |c, _| {
        let changed = c.set_floor(&home.id, target)?;
        Ok(Outcome {
            result: changed.then(|| stamp(c, &home)),
            changed,
        })
    })?;
    if let Some(stored) = outcome.result {
        replicate_state(ctx, args.raw(1), &stored);
        ctx.key_changed(c"pnc.floor", args.raw(1));
    }
    Ok(Reply::Ok)
}

/// Stamps the counter with the id in use (a local write) and returns its stored form.
fn stamp(c: &mut PnCounter, home: &Home) -> Vec<u8> {
    c.set_home(Some(home.clone()));
    pnc_format::encode_stored(c)
}

/// PNC.GIVE key to-replica amount: moves rights of this deployment to another.
pub fn give(ctx: Ctx, args: &Args) -> CommandResult {
    check_arity(args, 4, "pnc.give")?;
    let to = ReplicaId::parse(args.bytes(2))
        .map_err(|e| CommandError(format!("ERR invalid replica id: {e}").into()))?;
    let amount = Some(integer(args.bytes(3))?)
        .filter(|a| *a > 0)
        .ok_or(AMOUNT_NOT_POSITIVE)?;
    let home = local_home(ctx, "PNC.GIVE")?;
    let outcome = write(ctx, args.raw(1), |c, _| {
        let left = c.give(&home.id, &to, amount)?;
        Ok(Outcome {
            result: left.map(|left| (clamp(left), stamp(c, &home))),
            changed: left.is_some(),
        })
    })?;
    match outcome.result {
        Some((left, stored)) => {
            replicate_state(ctx, args.raw(1), &stored);
            ctx.key_changed(c"pnc.give", args.raw(1));
            Ok(Reply::Integer(left))
        }
        None => Ok(Reply::Null),
    }
}

/// What a `PNC.DECRFLOOR` did.
struct Decided {
    reply: Option<i64>,
    /// A first outcome (not a token's replay): what to replicate.
    fresh: bool,
}

/// PNC.DECRFLOOR key amount [TOKEN token]
pub fn decrfloor(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 3 {
        return Err(crate::commands::wrong_arity("pnc.decrfloor"));
    }
    let parsed = args.with_words(2, parse_decrement)?;
    if parsed.at.is_some() {
        return Err(SYNTAX_ERROR);
    }
    let (amount, token) = (parsed.amount, parsed.token);
    let home = local_home(ctx, "PNC.DECRFLOOR")?;
    let outcome = write(ctx, args.raw(1), |c, _| {
        if let Some(e) = token.and_then(|t| c.recorded_token(t)) {
            if e.amount != amount {
                return Err(TOKEN_REUSED);
            }
            return Ok(Outcome {
                result: Decided {
                    reply: e.reply,
                    fresh: false,
                },
                changed: false,
            });
        }
        let reply = match c.decrement_within_rights(&home.id, amount)? {
            Decrement::Granted(value) => Some(value),
            Decrement::Refused => None,
        };
        if let Some(t) = token {
            c.record_token(LedgerEntry {
                token: t.into(),
                amount,
                reply,
            });
        }
        let changed = reply.is_some() || token.is_some();
        if changed {
            c.set_home(Some(home.clone()));
        }
        Ok(Outcome {
            result: Decided { reply, fresh: true },
            changed,
        })
    })?;
    let Decided { reply, fresh } = outcome.result;
    if fresh {
        match reply {
            Some(_) => PNC_DECR_GRANTED.incr(),
            None => {
                PNC_DECR_REFUSED.incr();
                pnc_refusals::note(args.bytes(1), amount);
            }
        }
    }
    if outcome.changed {
        let delta = if reply.is_some() { -amount } else { 0 };
        let amount_text = amount.to_string();
        let record: Vec<&[u8]> = match token {
            Some(t) => vec![
                b"TOKEN",
                t,
                amount_text.as_bytes(),
                if reply.is_some() { b"1" } else { b"0" },
            ],
            None => Vec::new(),
        };
        replicate_apply_with(ctx, args.raw(1), &home, delta, &record);
        ctx.key_changed(c"pnc.decrfloor", args.raw(1));
    }
    Ok(reply.map_or(Reply::Null, Reply::Integer))
}

/// The `TOKEN token amount granted` record a replicated `PNC.APPLY` may carry.
pub struct AppliedToken<'a> {
    token: &'a [u8],
    amount: i64,
    granted: bool,
}

impl AppliedToken<'_> {
    /// The ledger entry, given the value the applied delta left.
    pub fn entry(&self, value: i64) -> LedgerEntry {
        LedgerEntry {
            token: self.token.into(),
            amount: self.amount,
            reply: self.granted.then_some(value),
        }
    }
}

/// Parses `PNC.APPLY key id gen delta [TOKEN token amount 1|0]`.
pub fn applied_token<'a>(args: &Args<'a>) -> Result<Option<AppliedToken<'a>>, CommandError> {
    if args.len() == 5 {
        return Ok(None);
    }
    if !args.bytes(5).eq_ignore_ascii_case(b"TOKEN") {
        return Err(SYNTAX_ERROR);
    }
    let token = args.bytes(6);
    if token.is_empty() || token.len() > pnc_format::MAX_TOKEN_LEN {
        return Err(super::ctr_args::BAD_TOKEN);
    }
    let granted = match args.bytes(8) {
        b"1" => true,
        b"0" => false,
        _ => return Err(SYNTAX_ERROR),
    };
    Ok(Some(AppliedToken {
        token,
        amount: integer(args.bytes(7))?,
        granted,
    }))
}
