//! CTR.* command handlers: parse, run the counter core, reply, replicate, notify.

use crate::commands::parse::integer;
use crate::counter::{Counter, CounterCell, CounterError};
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Key, KeyContent, Reply, WRONG_TYPE};
use crate::persist::ctr_format;
use crate::persist::ctr_type::ctr_type;

impl From<CounterError> for CommandError {
    fn from(e: CounterError) -> Self {
        CommandError::fixed(e.message())
    }
}

/// The value of the counter at `key` (0 when missing), or WRONGTYPE.
fn read_value(ctx: Ctx, key: crate::ffi::RawString) -> Result<i64, CommandError> {
    let k = Key::open(ctx, key, false);
    match k.content(ctr_type()) {
        KeyContent::Empty => Ok(0),
        // SAFETY: the key is open and holds a live counter for the duration of this borrow.
        KeyContent::Mine(raw) => Ok(unsafe { CounterCell::borrow(raw) }.value()),
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

/// Applies `f` to the counter at `key`, creating it at 0 when missing. Nothing is stored when
/// `f` fails.
fn update_counter<R>(
    ctx: Ctx,
    key: crate::ffi::RawString,
    f: impl FnOnce(&mut Counter) -> Result<R, CommandError>,
) -> Result<R, CommandError> {
    let k = Key::open(ctx, key, true);
    match k.content(ctr_type()) {
        KeyContent::Empty => {
            let mut counter = Counter::default();
            let result = f(&mut counter)?;
            let raw = CounterCell::new(counter).into_raw();
            if !k.set_value(ctr_type(), raw) {
                // SAFETY: the keyspace refused the value; we still own it.
                drop(unsafe { CounterCell::from_raw(raw) });
                return Err(CommandError::fixed("ERR could not store the counter"));
            }
            Ok(result)
        }
        KeyContent::Mine(raw) => {
            // SAFETY: the key is open for writing and holds a live counter we access alone.
            let (result, new_cell) = unsafe { CounterCell::update(raw, f) };
            if let Some(cell) = new_cell {
                let new_raw = cell.into_raw();
                match k.replace_value(ctr_type(), new_raw) {
                    // SAFETY: the keyspace handed the old value back to us.
                    Some(old) => drop(unsafe { CounterCell::from_raw(old) }),
                    // SAFETY: refused: the new value is still ours.
                    None => drop(unsafe { CounterCell::from_raw(new_raw) }),
                }
            }
            result
        }
        KeyContent::Other => Err(WRONG_TYPE),
    }
}

/// CTR.ADD key delta
pub fn add(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(crate::commands::wrong_arity("ctr.add"));
    }
    let delta = integer(args.bytes(2))?;
    let value = update_counter(ctx, args.raw(1), |c| Ok(c.add(0, delta)?))?;
    crate::metrics::ADDS.incr();
    ctx.replicate_verbatim();
    ctx.notify(c"ctr.add", args.raw(1));
    Ok(Reply::Integer(value))
}

/// CTR.GET key
pub fn get(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(crate::commands::wrong_arity("ctr.get"));
    }
    Ok(Reply::Integer(read_value(ctx, args.raw(1))?))
}

/// CTR.MGET key [key ...]
pub fn mget(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() < 2 {
        return Err(crate::commands::wrong_arity("ctr.mget"));
    }
    let values = (1..args.len())
        .map(|i| read_value(ctx, args.raw(i)).map(Reply::Integer))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::Array(values))
}

/// CTR.SETSTATE key payload: replaces the counter with a decoded `ctr_format` payload. The AOF
/// rewrite emits it; it is deterministic, so it replicates verbatim.
pub fn setstate(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 3 {
        return Err(crate::commands::wrong_arity("ctr.setstate"));
    }
    let counter = ctr_format::decode(args.bytes(2))
        .map_err(|e| CommandError(format!("ERR invalid CTR state: {e}").into()))?;
    update_counter(ctx, args.raw(1), |c| {
        *c = counter;
        Ok(())
    })?;
    ctx.replicate_verbatim();
    ctx.notify(c"ctr.setstate", args.raw(1));
    Ok(Reply::Ok)
}
