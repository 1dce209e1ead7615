//! `CTR.ORPHANS [DELETE spread-id]`: what this master's orphan audit reports
//! (`crate::runtime::spread_audit`), and the operator's order to delete one reported spread's
//! holders here.

use crate::ffi::{Args, CommandError, CommandResult, Ctx, Reply};
use crate::runtime::spread_audit::{delete_orphans, orphans};

/// Without arguments: the spreads this master's audit reports as orphans, each as
/// `[spread id (16 hex digits), carried home name, [holder names here], reported since (ms)]`.
/// `DELETE id`: deletes this master's holders of that reported spread (each read again: still
/// a holder of exactly that spread id and carried home, in a slot this master serves); replies
/// how many keys went. An id that is not reported here is an error and deletes nothing.
pub fn orphans_command(ctx: Ctx, args: &Args) -> CommandResult {
    match args.len() {
        1 => Ok(Reply::Array(
            orphans().into_iter().map(orphan_reply).collect(),
        )),
        3 if args.bytes(1).eq_ignore_ascii_case(b"delete") => {
            let id = parse_spread_id(args.bytes(2))?;
            match delete_orphans(ctx, id) {
                Some(deleted) => Ok(Reply::Integer(deleted as i64)),
                None => Err(CommandError(
                    format!("ERR no orphaned spread {id:016x} is reported on this node").into(),
                )),
            }
        }
        2 | 3 => Err(CommandError::fixed("ERR syntax error")),
        _ => Err(super::wrong_arity("ctr.orphans")),
    }
}

fn orphan_reply(o: crate::runtime::spread_audit::Orphan) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(format!("{:016x}", o.spread_id).into_bytes()),
        Reply::Bulk(o.home),
        Reply::Array(o.holders.into_iter().map(Reply::Bulk).collect()),
        Reply::Integer(o.since_ms),
    ])
}

/// A spread id as `CTR.ORPHANS` lists it: 1 to 16 hex digits, not 0.
fn parse_spread_id(word: &[u8]) -> Result<u64, CommandError> {
    let bad =
        || CommandError::fixed("ERR invalid spread id (16 hex digits, as CTR.ORPHANS lists it)");
    if word.is_empty() || word.len() > 16 {
        return Err(bad());
    }
    let text = std::str::from_utf8(word).map_err(|_| bad())?;
    match u64::from_str_radix(text, 16) {
        Ok(id) if id != 0 => Ok(id),
        _ => Err(bad()),
    }
}
