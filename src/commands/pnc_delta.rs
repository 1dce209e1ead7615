//! `PNC.STATE key SINCE version`: delta states for `pnc-sync` (issue 36). The rules (what a
//! delta holds, when a version is still answerable) are `crate::pncounter::delta`; the table of
//! recent snapshots is `crate::runtime::pnc_snapshots`; this file parses and replies.

use super::pnc_store::read;
use crate::ffi::{Args, CommandError, CommandResult, Ctx, Reply};
use crate::persist::pnc_format::encode_state;
use crate::pncounter::delta::Version;
use crate::pncounter::{identity, PnCounter, ReplicaId};
use crate::runtime::pnc_snapshots;

const BAD_VERSION: CommandError =
    CommandError::fixed("ERR invalid version (give 0, or a version PNC.STATE key SINCE replied)");

/// PNC.STATE key SINCE version: `[version, "delta" | "full", state or nil]`.
pub fn state_since(ctx: Ctx, args: &Args) -> CommandResult {
    let since = match args.bytes(3) {
        b"0" => None,
        text => Some(Version::parse(text).ok_or(BAD_VERSION)?),
    };
    let current = read(ctx, args.raw(1), |c| c.map(PnCounter::shipped))?;
    // This deployment's ids: the parts it wrote are the ones it ships (delta::delta).
    let ident = identity();
    // (the id in use, and with a configured id its failover successors; a random id's earlier
    // ids are left to the whole states pnc-sync ships from time to time).
    let own = |id: &ReplicaId| {
        ident.current().is_some_and(|h| h.id == *id)
            || (ident.configured().is_some() && ident.is_own_lineage(id))
    };
    let empty = PnCounter::new();
    let answer = pnc_snapshots::answer(
        args.bytes(1),
        current.as_ref().unwrap_or(&empty),
        since,
        own,
    );
    drop(ident);
    let (kind, blob) = match (&current, &answer.delta) {
        (None, _) => ("full", Reply::Null),
        (Some(_), Some(d)) => ("delta", Reply::Bulk(encode_state(d))),
        (Some(c), None) => ("full", Reply::Bulk(encode_state(c))),
    };
    Ok(Reply::Array(vec![
        Reply::Bulk(answer.version.render().into_bytes()),
        Reply::Bulk(kind.as_bytes().to_vec()),
        blob,
    ]))
}
