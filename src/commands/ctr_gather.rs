//! `CTR.GATHER request`: a gather request from another node's read link
//! (`crate::runtime::read_links`), answered with the response's bytes.

use crate::ffi::{Args, CommandError, CommandResult, Ctx, Reply};
use crate::runtime::spread_cluster::Caller;
use crate::runtime::spread_gather::answer_request;

/// Each holder is read with the calling client's ACL rights, through the server's routing
/// check, as a bus request is.
pub fn answer_link_request(ctx: Ctx, args: &Args) -> CommandResult {
    if args.len() != 2 {
        return Err(super::wrong_arity("ctr.gather"));
    }
    answer_request(ctx, args.bytes(1), Caller::Client)
        .map(Reply::Bulk)
        .ok_or(CommandError::fixed("ERR malformed gather request"))
}
