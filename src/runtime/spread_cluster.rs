//! What spread counters need from the server beyond keys: reading a holder through the
//! server's own routing check (`RM_Call`, which refuses a key whose slot this node does not
//! serve, where `RM_OpenKey` would silently read an empty key), the slot -> master map (from
//! `CLUSTER SHARDS`: Redis 7.0 has no slot API for modules), and cluster-bus sends.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr};
use std::net::SocketAddr;
use std::rc::Rc;

use redis_module::raw;

use crate::counter::spread::{name_in_slots, SlotOwners, SLOTS};
use crate::counter::CounterRef;
use crate::ffi::{rm, CommandError, Ctx, KeyName};
use crate::persist::gather_msg::HolderAnswer;
use crate::protocol::messages::MessageKind;

pub use crate::protocol::messages::NodeId;

/// How long a slot map is trusted before a gather or a spread fetches it again.
const TOPOLOGY_MAX_AGE_MS: i64 = 1000;
const UNASSIGNED: u16 = u16::MAX;

/// A reply of `RM_Call`, freed on drop.
struct CallReply(*mut raw::RedisModuleCallReply);

impl Drop for CallReply {
    fn drop(&mut self) {
        // SAFETY: a non-null reply returned by RM_Call, freed once.
        unsafe { rm!(RedisModule_FreeCallReply)(self.0) }
    }
}

/// A reply or one of its elements (elements belong to the root reply).
#[derive(Clone, Copy)]
struct ReplyRef<'a>(
    *mut raw::RedisModuleCallReply,
    std::marker::PhantomData<&'a ()>,
);

impl<'a> ReplyRef<'a> {
    fn kind(self) -> c_int {
        // SAFETY: a live reply.
        unsafe { rm!(RedisModule_CallReplyType)(self.0) }
    }
    fn integer(self) -> i64 {
        // SAFETY: a live reply.
        unsafe { rm!(RedisModule_CallReplyInteger)(self.0) }
    }
    fn len(self) -> usize {
        // SAFETY: a live reply.
        unsafe { rm!(RedisModule_CallReplyLength)(self.0) }
    }
    fn element(self, i: usize) -> Option<ReplyRef<'a>> {
        // SAFETY: a live reply; out-of-range indexes give null.
        let e = unsafe { rm!(RedisModule_CallReplyArrayElement)(self.0, i) };
        (!e.is_null()).then_some(ReplyRef(e, std::marker::PhantomData))
    }
    fn bytes(self) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: a live reply; the pointer covers len bytes while the root reply lives.
        unsafe {
            let p = rm!(RedisModule_CallReplyStringPtr)(self.0, &mut len);
            if p.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
    }
}

impl CallReply {
    fn root(&self) -> ReplyRef<'_> {
        ReplyRef(self.0, std::marker::PhantomData)
    }
}

/// Reads one holder with `CTR.GET`, through the server's routing check: a holder whose slot
/// this node does not serve (moved, migrating and already gone, cluster down, or being handed
/// over by an atomic slot migration) is `NotHere`, never a silent 0.
pub fn read_holder(ctx: *mut raw::RedisModuleCtx, name: &[u8]) -> HolderAnswer {
    read_holder_as(ctx, name, Caller::Module)
}

/// Whose rights a holder read runs with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The module's own (a bus request, a timer): no ACL user.
    Module,
    /// The client of the command being run (`CTR.GATHER` on a read link): its ACL user must
    /// be allowed to read the holder.
    Client,
}

/// [`read_holder`], checking the calling client's ACL rights when `caller` is a client.
pub fn read_holder_as(ctx: *mut raw::RedisModuleCtx, name: &[u8], caller: Caller) -> HolderAnswer {
    // The slot is being handed over to another master (atomic slot migration): it may be the
    // other master's already, and this copy no longer the counter's.
    if super::slot_migration::handing_off(name) {
        return HolderAnswer::NotHere;
    }
    let was_reading = READING_A_HOLDER.with(|r| r.replace(true));
    // "C": run as the calling client's ACL user.
    let format = match caller {
        Caller::Module => c"b",
        Caller::Client => c"bC",
    };
    // SAFETY: ctx is live; "b" takes (pointer, length).
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx,
            c"CTR.GET".as_ptr(),
            format.as_ptr(),
            name.as_ptr().cast::<c_char>(),
            name.len(),
        )
    };
    let refused = std::io::Error::last_os_error().raw_os_error();
    READING_A_HOLDER.with(|r| r.set(was_reading));
    if reply.is_null() {
        if refused == Some(libc::EACCES) && caller == Caller::Client {
            return HolderAnswer::Failed("the user has no permissions to read it (NOPERM)".into());
        }
        return HolderAnswer::NotHere;
    }
    let reply = CallReply(reply);
    let root = reply.root();
    match root.kind() as isize {
        raw::REDISMODULE_REPLY_INTEGER => match holder_bounds(ctx, name) {
            (floor, Some(ceiling)) => HolderAnswer::Ceiled {
                value: root.integer(),
                ceiling,
                floor,
            },
            (Some(floor), None) => HolderAnswer::Floored(root.integer(), floor),
            (None, None) => HolderAnswer::Value(root.integer()),
        },
        _ => HolderAnswer::Failed(String::from_utf8_lossy(root.bytes()).into_owned()),
    }
}

thread_local! {
    /// Set while [`read_holder`] reads a holder: that nested `CTR.GET` gives the holder's own
    /// units, never a gather of holders it may list (a forged or renamed state), so reads
    /// never recurse.
    static READING_A_HOLDER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True inside [`read_holder`]'s read of a holder.
pub fn reading_a_holder() -> bool {
    READING_A_HOLDER.with(std::cell::Cell::get)
}

/// The own floor and ceiling of the counter at `name` (read right after its value, on this
/// thread), each with the units of its fold in flight. A ceiling is answered only for a
/// counter that has one or folds ceiling units home: an unceiled holder folding back answers
/// as before ceilings (its fold's 0 ceiling units, which a read counts as no ceiling, stay
/// off the wire).
fn holder_bounds(ctx: *mut raw::RedisModuleCtx, name: &[u8]) -> (Option<i64>, Option<i64>) {
    let ctx = Ctx { ptr: ctx };
    let key = KeyName::new(ctx, name);
    let floor = super::ctr_store::floor_in_hand(ctx, key.raw).ok().flatten();
    let ceiling = super::ctr_store::with_counter(ctx, key.raw, |c| match c {
        Some(CounterRef::Boxed(b)) => {
            (b.ceiling_in_hand()).filter(|&in_hand| in_hand != 0 || b.ceiling().is_some())
        }
        _ => None,
    });
    (floor, ceiling.ok().flatten())
}

/// True when the server's routing check lets this node run a command on `name` (its slot is
/// served here and, when migrating, the key has not moved yet): `RM_Call` of `EXISTS`, which
/// the server refuses (a null reply) for a key it would redirect.
pub fn routed_here(ctx: *mut raw::RedisModuleCtx, name: &[u8]) -> bool {
    route(ctx, name) == Route::Here
}

/// Where the server's routing check sends a command on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Here,
    /// Its slot is served elsewhere (or the key is migrating away).
    Elsewhere,
    /// The cluster is down (`cluster_state:fail`, e.g. a node just restarted that has not
    /// heard from the others yet): nothing can be said about the slot.
    ClusterDown,
}

/// The routing check of [`routed_here`], telling a cluster that is down (`RM_Call` sets
/// `ENETDOWN` or `EROFS`) from a slot served elsewhere.
pub fn route(ctx: *mut raw::RedisModuleCtx, name: &[u8]) -> Route {
    // SAFETY: ctx is live; "b" takes (pointer, length).
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx,
            c"EXISTS".as_ptr(),
            c"b".as_ptr(),
            name.as_ptr().cast::<c_char>(),
            name.len(),
        )
    };
    if reply.is_null() {
        let errno = std::io::Error::last_os_error().raw_os_error();
        return match errno {
            Some(e) if e == ENETDOWN || e == EROFS => Route::ClusterDown,
            _ => Route::Elsewhere,
        };
    }
    drop(CallReply(reply));
    Route::Here
}

/// Every key of `slot` in the selected database (`CLUSTER COUNTKEYSINSLOT`, then
/// `CLUSTER GETKEYSINSLOT`, O(keys of the slot)); None when the slot holds more than `max` keys
/// or a reply cannot be read (the caller cannot then say a name is missing from the slot).
pub fn keys_in_slot(ctx: Ctx, slot: u16, max: i64) -> Option<Vec<Vec<u8>>> {
    let slot = slot.to_string();
    let call = |sub: &CStr, count: Option<&str>| {
        let count = count.unwrap_or("");
        // SAFETY: ctx is live; "cbb" takes a C string and two (pointer, length) pairs; the
        // empty count is not passed when absent ("cb").
        let reply = unsafe {
            if count.is_empty() {
                rm!(RedisModule_Call)(
                    ctx.ptr,
                    c"CLUSTER".as_ptr(),
                    c"cb".as_ptr(),
                    sub.as_ptr(),
                    slot.as_ptr().cast::<c_char>(),
                    slot.len(),
                )
            } else {
                rm!(RedisModule_Call)(
                    ctx.ptr,
                    c"CLUSTER".as_ptr(),
                    c"cbb".as_ptr(),
                    sub.as_ptr(),
                    slot.as_ptr().cast::<c_char>(),
                    slot.len(),
                    count.as_ptr().cast::<c_char>(),
                    count.len(),
                )
            }
        };
        (!reply.is_null()).then(|| CallReply(reply))
    };
    let counted = call(c"COUNTKEYSINSLOT", None)?;
    let root = counted.root();
    if root.kind() as isize != raw::REDISMODULE_REPLY_INTEGER
        || !(0..=max).contains(&root.integer())
    {
        return None;
    }
    let n = root.integer();
    if n == 0 {
        return Some(Vec::new());
    }
    let listed = call(c"GETKEYSINSLOT", Some(&n.to_string()))?;
    let root = listed.root();
    if root.kind() as isize != raw::REDISMODULE_REPLY_ARRAY {
        return None;
    }
    let keys: Vec<Vec<u8>> = (0..root.len())
        .filter_map(|i| root.element(i).map(|e| e.bytes().to_vec()))
        .collect();
    (keys.len() as i64 == n).then_some(keys)
}

/// Linux's errno values that `RM_Call` sets when the cluster is down.
const ENETDOWN: i32 = 100;
const EROFS: i32 = 30;

/// Which master serves each slot, and who this node is.
pub struct Topology {
    fetched_ms: i64,
    /// This node's id (None outside a cluster).
    pub myself: Option<NodeId>,
    /// Masters owning at least one slot, sorted by id.
    pub masters: Vec<NodeId>,
    /// slot -> index in `masters`, or UNASSIGNED.
    owners: Vec<u16>,
    /// Each master's plain client address, when `CLUSTER SHARDS` lists one (for read links).
    addresses: Vec<Option<SocketAddr>>,
}

impl SlotOwners for Topology {
    fn masters(&self) -> usize {
        self.masters.len().max(1)
    }
    fn owner(&self, slot: u16) -> Option<usize> {
        match self.owners.get(usize::from(slot)) {
            Some(&m) if m != UNASSIGNED => Some(usize::from(m)),
            _ => None,
        }
    }
}

impl Topology {
    /// The plain client address of master `node` (None: unknown, or TLS only).
    pub fn client_address(&self, node: &NodeId) -> Option<SocketAddr> {
        let index = self.masters.binary_search(node).ok()?;
        *self.addresses.get(index)?
    }

    /// The master serving `slot`, when it is not this node; Ok(None) when it is this node.
    pub fn remote_owner(&self, slot: u16) -> Result<Option<NodeId>, CommandError> {
        let master = self
            .owner(slot)
            .and_then(|m| self.masters.get(m))
            .ok_or_else(|| {
                CommandError(
                    format!("CLUSTERDOWN spread counter holder slot {slot} is not served").into(),
                )
            })?;
        Ok((Some(*master) != self.myself).then_some(*master))
    }
}

thread_local! {
    static TOPOLOGY: RefCell<Option<Rc<Topology>>> = const { RefCell::new(None) };
}

/// True when the server runs in cluster mode.
pub fn in_cluster(ctx: Ctx) -> bool {
    ctx.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
}

/// The slot map, fetched again when older than a second or when `fresh` is asked.
pub fn topology(ctx: Ctx, fresh: bool) -> Result<Rc<Topology>, CommandError> {
    let now = ctx.now_ms();
    let cached = TOPOLOGY.with(|t| t.borrow().clone());
    if let Some(t) = cached {
        if !fresh && now.saturating_sub(t.fetched_ms) < TOPOLOGY_MAX_AGE_MS {
            return Ok(t);
        }
    }
    let t = Rc::new(fetch_topology(ctx, now)?);
    TOPOLOGY.with(|cell| *cell.borrow_mut() = Some(t.clone()));
    Ok(t)
}

/// Forgets the slot map (a holder was not where it said).
pub fn forget_topology() {
    TOPOLOGY.with(|cell| *cell.borrow_mut() = None);
}

fn my_id() -> Option<NodeId> {
    // SAFETY: plain call; the id is 40 bytes, not NUL-terminated.
    let p = unsafe { rm!(RedisModule_GetMyClusterID)() };
    if p.is_null() {
        return None;
    }
    let mut id = [0u8; 40];
    // SAFETY: the server's node name buffer is 40 bytes long.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), id.as_mut_ptr(), 40) };
    Some(id)
}

/// The value of `field` in a RESP2 map reply (a flat array of field, value, ...).
fn map_field<'a>(map: ReplyRef<'a>, field: &[u8]) -> Option<ReplyRef<'a>> {
    (0..map.len() / 2).find_map(|i| {
        let name = map.element(2 * i)?;
        (name.bytes() == field).then(|| map.element(2 * i + 1))?
    })
}

/// The slot map from `CLUSTER SHARDS`. Not `CLUSTER SLOTS`: Valkey before 9.0.1 crashes when a
/// module's `RM_Call` of `CLUSTER SLOTS` from a timer or a bus receiver has to rebuild the
/// server's cached reply (which it does after a node's health changes, e.g. in a failover):
/// the cache is built for a fake client and asks for the peer address of the current client,
/// which there is none of outside a command (valkey-io/valkey#2912). `CLUSTER SHARDS` (Redis
/// 7.0+, every Valkey) has no such cache.
fn fetch_topology(ctx: Ctx, now: i64) -> Result<Topology, CommandError> {
    const BAD: CommandError = CommandError::fixed("ERR could not read the cluster slot map");
    // SAFETY: ctx is live; "c" takes a C string.
    let reply = unsafe {
        rm!(RedisModule_Call)(
            ctx.ptr,
            c"CLUSTER".as_ptr(),
            c"c".as_ptr(),
            c"SHARDS".as_ptr(),
        )
    };
    if reply.is_null() {
        return Err(BAD);
    }
    let reply = CallReply(reply);
    let root = reply.root();
    if root.kind() as isize != raw::REDISMODULE_REPLY_ARRAY {
        return Err(BAD);
    }
    let myself = my_id();
    let mut ranges: Vec<(usize, usize, NodeId)> = Vec::new();
    let mut addresses: Vec<(NodeId, Option<SocketAddr>)> = Vec::new();
    for i in 0..root.len() {
        let shard = root.element(i).ok_or(BAD)?;
        let slots = map_field(shard, b"slots").ok_or(BAD)?;
        if slots.len() == 0 {
            continue; // a shard without slots (an emptied or failed-over former master)
        }
        let mut pairs = Vec::with_capacity(slots.len() / 2);
        for pair in 0..slots.len() / 2 {
            let first = slot_number(slots.element(2 * pair)).ok_or(BAD)?;
            let last = slot_number(slots.element(2 * pair + 1)).ok_or(BAD)?;
            if first > last {
                return Err(BAD);
            }
            pairs.push((first, last));
        }
        let nodes = map_field(shard, b"nodes").ok_or(BAD)?;
        let masters: Vec<ReplyRef> = (0..nodes.len())
            .filter_map(|n| nodes.element(n))
            .filter(|n| is(*n, b"role", b"master"))
            .collect();
        let master = shard_master(ctx, &masters, &pairs, myself).ok_or(BAD)?;
        let id = node_id(master).ok_or(BAD)?;
        addresses.push((id, client_address(master)));
        ranges.extend(pairs.into_iter().map(|(first, last)| (first, last, id)));
    }
    let mut masters: Vec<NodeId> = ranges.iter().map(|r| r.2).collect();
    masters.sort_unstable();
    masters.dedup();
    let mut owners = vec![UNASSIGNED; usize::from(SLOTS)];
    for (first, last, id) in ranges {
        let index = masters.binary_search(&id).map_err(|_| BAD)?;
        owners[first..=last].fill(index as u16);
    }
    let addresses = masters
        .iter()
        .map(|m| {
            addresses
                .iter()
                .find(|(id, _)| id == m)
                .and_then(|(_, a)| *a)
        })
        .collect();
    Ok(Topology {
        fetched_ms: now,
        myself,
        masters,
        owners,
        addresses,
    })
}

/// True when a `CLUSTER SHARDS` node entry has `field` equal to `value`.
fn is(node: ReplyRef, field: &[u8], value: &[u8]) -> bool {
    map_field(node, field).is_some_and(|v| v.bytes() == value)
}

/// A node's id from its `CLUSTER SHARDS` entry.
fn node_id(node: ReplyRef) -> Option<NodeId> {
    map_field(node, b"id")?.bytes().try_into().ok()
}

/// The master serving a shard's slots (`ranges`). A shard lists several masters when a
/// replica took over and its old master is still listed as one: failed, or not failed yet (a
/// takeover). This server (`myself`), when it is one of them, asks its own routing check,
/// which knows; otherwise an online one goes first.
fn shard_master<'a>(
    ctx: Ctx,
    masters: &[ReplyRef<'a>],
    ranges: &[(usize, usize)],
    myself: Option<NodeId>,
) -> Option<ReplyRef<'a>> {
    let serves_here = |n: &&ReplyRef| {
        myself.is_some_and(|me| node_id(**n) == Some(me))
            && name_in_slots(ranges).is_some_and(|name| routed_here(ctx.ptr, &name))
    };
    let here = (masters.len() > 1).then(|| masters.iter().find(serves_here));
    here.flatten()
        .or_else(|| masters.iter().find(|n| is(**n, b"health", b"online")))
        .or(masters.first())
        .copied()
}

/// A node's plain (not TLS) client address from its `CLUSTER SHARDS` entry.
fn client_address(node: ReplyRef) -> Option<SocketAddr> {
    let ip: std::net::IpAddr = std::str::from_utf8(map_field(node, b"ip")?.bytes())
        .ok()?
        .parse()
        .ok()?;
    let port = map_field(node, b"port")?;
    let port = if port.kind() as isize == raw::REDISMODULE_REPLY_INTEGER {
        port.integer()
    } else {
        std::str::from_utf8(port.bytes()).ok()?.parse().ok()?
    };
    let port = u16::try_from(port).ok().filter(|&p| p != 0)?;
    Some(SocketAddr::new(ip, port))
}

/// A slot bound of `CLUSTER SHARDS` (an integer; a string on some servers), within 0..SLOTS.
fn slot_number(reply: Option<ReplyRef>) -> Option<usize> {
    let reply = reply?;
    let n = if reply.kind() as isize == raw::REDISMODULE_REPLY_INTEGER {
        reply.integer()
    } else {
        std::str::from_utf8(reply.bytes()).ok()?.parse().ok()?
    };
    usize::try_from(n).ok().filter(|&n| n < usize::from(SLOTS))
}

/// Sends a bus message; false when the node is unknown or has no link right now (delivery is
/// best effort even when true).
pub fn send(ctx: *mut raw::RedisModuleCtx, to: &NodeId, kind: MessageKind, payload: &[u8]) -> bool {
    let Ok(len) = u32::try_from(payload.len()) else {
        return false;
    };
    // The send path looks the id up with strlen: give it a terminated copy.
    let mut target = [0u8; 41];
    target[..40].copy_from_slice(to);
    // SAFETY: ctx is live; target is NUL-terminated; payload covers len bytes.
    let status = unsafe {
        rm!(RedisModule_SendClusterMessage)(
            ctx,
            target.as_ptr().cast(),
            kind.byte(),
            payload.as_ptr().cast(),
            len,
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// The server's callback for every bus message of this module (one receiver, registered for
/// each kind of the table by `bus`): hands `handle` the sender's id and the payload as Rust
/// values, and contains a panic (a defect, which must not take the server down) under
/// `callback`'s name.
///
/// # Safety
/// As [`received`]; `ctx` is the receiver's live context.
pub unsafe fn on_bus_message(
    ctx: *mut raw::RedisModuleCtx,
    callback: &'static str,
    sender: *const c_char,
    payload: *const std::ffi::c_uchar,
    len: u32,
    handle: impl FnOnce(Ctx, NodeId, &[u8]),
) {
    // SAFETY: per the caller's contract.
    let (from, bytes) = unsafe { received(sender, payload, len) };
    let c = Ctx { ptr: ctx };
    crate::guard::guard(ctx, callback, || handle(c, from, bytes));
}

/// The sender's id (40 bytes, not terminated on Redis) and the payload of a received bus
/// message.
///
/// # Safety
/// `sender` must point to at least 40 readable bytes, `payload` to `len` bytes (or be null).
unsafe fn received<'a>(
    sender: *const c_char,
    payload: *const std::ffi::c_uchar,
    len: u32,
) -> (NodeId, &'a [u8]) {
    let mut id = [0u8; 40];
    // SAFETY: per the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(sender.cast::<u8>(), id.as_mut_ptr(), 40) };
    let bytes = if payload.is_null() || len == 0 {
        &[][..]
    } else {
        // SAFETY: per the caller's contract.
        unsafe { std::slice::from_raw_parts(payload, len as usize) }
    };
    (id, bytes)
}
