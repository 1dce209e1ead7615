//! Read links: this node's own TCP connections to the client ports of the other masters, which
//! carry a gather's requests (`CTR.GATHER <request>`, the bus request's bytes) and bring the
//! answers back with `TCP_NODELAY`, without the cluster bus's latency.
//!
//! Why: a gathered read waits for every other master. Over the bus, a module message and its
//! answer travel on two links without `TCP_NODELAY` (Redis 7.0 sets it on accepted links only),
//! so back-to-back gathers wait for delayed ACKs, and a round takes milliseconds on Redis 8.6.
//! Redis's own multi-shard modules (RediSearch's coordinator, LibMR) keep connection pools to
//! the other shards' client ports for the same reason.
//!
//! How (one link per master, made on first use, non-blocking, driven by the server's event
//! loop through `RM_EventLoopAdd`):
//! - A link is only a faster path, never the only one: a request is sent on a link when the
//!   link is open and not backed up; otherwise, and whenever a link fails with requests on it
//!   (closed, an error reply, a protocol error), the request goes over the bus at once
//!   ([`Delivery::Lost`]), and the gather's own resends (over the bus) and timeout apply as
//!   before. An answer is recorded by the gather exactly as a bus answer is: only for a request
//!   id it sent to that master and has not had answered.
//! - Replies come back in order; each is handed to the gather from a timer run at once (`scheduler::When::Now`) (a proper
//!   module context, the same iteration of the event loop), never from inside the I/O callback.
//! - A new link first sends `AUTH` (when `ctr.read-link-user` or `ctr.read-link-password` is
//!   set) and `CLIENT SETNAME ctr-read-link`. A link that failed is made again after
//!   [`RETRY_MS`]; a failure's reason is logged once per master until it changes.
//! - Plain TCP only: a master whose client port is TLS-only (`CLUSTER SHARDS` lists no plain
//!   `port`) is read over the bus. `ctr.read-links no` sends everything over the bus.
//!
//! Bounds: one link per master; at most [`MAX_AWAITED`] requests awaiting answers and
//! [`MAX_UNSENT`] bytes unsent per link (past either, requests go over the bus); a reply longer
//! than [`MAX_REPLY`] closes the link.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use redis_module::raw;

use super::scheduler::{self, Job, When};
use super::spread_cluster::NodeId;
use crate::config;
use crate::ffi::{rm, Ctx};
use crate::guard::guard;
use crate::metrics;
use crate::persist::resp::{self, Parsed, RespReply};

/// The command a link sends (answered by `spread_gather::answer_link_request`).
pub const GATHER_COMMAND: &[u8] = b"CTR.GATHER";
/// How long a link that failed stays unused before it is made again.
const RETRY_MS: u64 = 1000;
/// How long a connect may take before the link is given up (a master whose host does not
/// answer at all would otherwise hold a link "connecting" for the kernel's SYN retries).
const CONNECT_TIMEOUT_MS: u64 = 1000;
/// The most requests awaiting answers on one link.
const MAX_AWAITED: usize = 4096;
/// The most bytes waiting to be written on one link.
const MAX_UNSENT: usize = 16 << 20;
/// The longest reply a link reads (an answer to a request of at most 1,024 holders is far
/// shorter).
const MAX_REPLY: usize = 16 << 20;
const READ_CHUNK: usize = 64 << 10;

/// What became of a request sent on a link, handed to the gather.
pub enum Delivery {
    /// The answer's bytes (a bus response payload), from that master.
    Answer(NodeId, Vec<u8>),
    /// The link failed before answering: send request `u64` to that master over the bus.
    Lost(NodeId, u64),
}

/// Receives deliveries (set once by the gather, which owns requests and answers).
pub type Handler = fn(Ctx, Delivery);

/// What a reply on a link answers, in order.
enum Awaited {
    /// `AUTH` or `CLIENT SETNAME`.
    Handshake,
    Request(u64),
}

struct Link {
    addr: SocketAddr,
    stream: TcpStream,
    /// This link's number: the I/O callback's data, so events of a closed link are ignored.
    number: usize,
    connected: bool,
    opened: Instant,
    unsent: Vec<u8>,
    received: Vec<u8>,
    awaited: VecDeque<Awaited>,
    watching_writes: bool,
}

#[derive(Default)]
struct Links {
    by_node: HashMap<NodeId, Link>,
    /// Link number -> its master.
    numbers: HashMap<usize, NodeId>,
    next_number: usize,
    /// Masters whose link failed, and when it may be made again.
    resting: HashMap<NodeId, Instant>,
    /// The last failure logged per master (logged again only when it changes).
    logged: HashMap<NodeId, String>,
    deliveries: Vec<Delivery>,
}

thread_local! {
    static LINKS: RefCell<Links> = RefCell::new(Links::default());
    static HANDLER: Cell<Option<Handler>> = const { Cell::new(None) };
    /// A context of the module's own, for arming the delivery timer from the I/O callback.
    static MODULE_CTX: Cell<*mut raw::RedisModuleCtx> = const { Cell::new(std::ptr::null_mut()) };
}

/// Registers the receiver of deliveries (from the module's load).
pub fn register(ctx: *mut raw::RedisModuleCtx, handler: Handler) {
    HANDLER.with(|h| h.set(Some(handler)));
    // SAFETY: ctx is the live load context; the detached context lives as long as the module.
    let own = unsafe { rm!(RedisModule_GetDetachedThreadSafeContext)(ctx) };
    MODULE_CTX.with(|c| c.set(own));
}

/// Sends request `id` (the bus request's bytes) to `node` on its link. False when it must go
/// over the bus: links are off, the master has no plain client address, its link is still
/// connecting, resting after a failure, or backed up.
pub fn send(node: &NodeId, addr: Option<SocketAddr>, id: u64, request: &[u8]) -> bool {
    let Some(addr) = addr.filter(|_| config::READ_LINKS.load(Relaxed)) else {
        return false;
    };
    let queued = LINKS.with(|l| {
        let mut links = l.borrow_mut();
        if links.by_node.get(node).is_some_and(|k| k.addr != addr) {
            links.close(node, "the master's address changed");
        }
        let Some(link) = links.by_node.get_mut(node) else {
            links.open(node, addr);
            return false;
        };
        let timeout = Duration::from_millis(CONNECT_TIMEOUT_MS);
        if !link.connected && link.opened.elapsed() > timeout {
            links.fail(
                node,
                &format!("cannot connect to {addr}: no answer within 1 s"),
            );
            return false;
        }
        let room = link.awaited.len() < MAX_AWAITED && link.unsent.len() < MAX_UNSENT;
        // Requests wait for the handshake's answers: a link that cannot authenticate is never
        // sent one.
        let shaking = matches!(link.awaited.front(), Some(Awaited::Handshake));
        if !link.connected || shaking || !room {
            return false;
        }
        link.unsent
            .extend(resp::encode_command(&[GATHER_COMMAND, request]));
        link.awaited.push_back(Awaited::Request(id));
        true
    });
    if queued {
        metrics::LINK_REQUESTS.incr();
        flush(node);
    }
    arm_delivery();
    queued
}

impl Links {
    /// Starts a non-blocking connect to `node` (not when it rests after a failure).
    fn open(&mut self, node: &NodeId, addr: SocketAddr) {
        if self
            .resting
            .get(node)
            .is_some_and(|&until| Instant::now() < until)
        {
            return;
        }
        self.resting.remove(node);
        let stream = match connect(addr) {
            Ok(stream) => stream,
            Err(e) => {
                self.fail(node, &format!("cannot connect to {addr}: {e}"));
                return;
            }
        };
        let number = self.next_number;
        self.next_number = self.next_number.wrapping_add(1);
        let mut link = Link {
            addr,
            stream,
            number,
            connected: false,
            opened: Instant::now(),
            unsent: Vec::new(),
            received: Vec::new(),
            awaited: VecDeque::new(),
            watching_writes: false,
        };
        for command in handshake() {
            link.unsent.extend(command);
            link.awaited.push_back(Awaited::Handshake);
        }
        // Writable: the connect finished (or failed); readable from then on.
        if !watch(&link, raw::REDISMODULE_EVENTLOOP_WRITABLE as c_int) {
            self.fail(node, "the event loop refused the link's socket");
            return;
        }
        link.watching_writes = true;
        self.numbers.insert(number, *node);
        self.by_node.insert(*node, link);
        metrics::LINKS_OPENED.incr();
    }

    /// Closes `node`'s link: its awaited requests are lost (sent over the bus by the gather).
    fn close(&mut self, node: &NodeId, why: &str) {
        let Some(link) = self.by_node.remove(node) else {
            return;
        };
        self.numbers.remove(&link.number);
        unwatch(&link);
        for awaited in link.awaited {
            if let Awaited::Request(id) = awaited {
                metrics::LINK_FALLBACKS.incr();
                self.deliveries.push(Delivery::Lost(*node, id));
            }
        }
        self.note(node, why);
    }

    /// A link that failed: closed, and not made again for a while.
    fn fail(&mut self, node: &NodeId, why: &str) {
        self.close(node, why);
        let rest = Instant::now() + Duration::from_millis(RETRY_MS);
        self.resting.insert(*node, rest);
    }

    /// Logs why a link to `node` failed, once until the reason changes.
    fn note(&mut self, node: &NodeId, why: &str) {
        if self.logged.get(node).is_some_and(|last| last == why) {
            return;
        }
        self.logged.insert(*node, why.to_string());
        let ctx = MODULE_CTX.with(Cell::get);
        if !ctx.is_null() {
            Ctx { ptr: ctx }.log_notice(&format!(
                "ctr: read link to master {}: {why} (its reads go over the cluster bus meanwhile)",
                String::from_utf8_lossy(node)
            ));
        }
    }
}

/// The commands a new link sends first.
fn handshake() -> Vec<Vec<u8>> {
    let user = config::READ_LINK_USER.get();
    let password = config::READ_LINK_PASSWORD.get();
    let mut commands = Vec::new();
    match (user.is_empty(), password.is_empty()) {
        (true, true) => {}
        (true, false) => commands.push(resp::encode_command(&[b"AUTH", password.as_bytes()])),
        _ => commands.push(resp::encode_command(&[
            b"AUTH",
            user.as_bytes(),
            password.as_bytes(),
        ])),
    }
    commands.push(resp::encode_command(&[
        b"CLIENT",
        b"SETNAME",
        b"ctr-read-link",
    ]));
    commands
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    socket.set_tcp_nodelay(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(socket.into())
}

fn watch(link: &Link, mask: c_int) -> bool {
    // SAFETY: the fd is the link's open socket; the data is a number, not a pointer.
    let status = unsafe {
        rm!(RedisModule_EventLoopAdd)(
            link.stream.as_raw_fd(),
            mask,
            Some(on_io),
            link.number as *mut c_void,
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

fn unwatch(link: &Link) {
    let all = (raw::REDISMODULE_EVENTLOOP_READABLE | raw::REDISMODULE_EVENTLOOP_WRITABLE) as c_int;
    // SAFETY: the fd is still open (closed when the stream drops, after this).
    unsafe { rm!(RedisModule_EventLoopDel)(link.stream.as_raw_fd(), all) };
}

/// Writes what `node`'s link can take now; watches for writability while some is left.
fn flush(node: &NodeId) {
    LINKS.with(|l| {
        let mut links = l.borrow_mut();
        let Some(link) = links.by_node.get_mut(node).filter(|k| k.connected) else {
            return;
        };
        let failure = write_some(link).err();
        if let Some(e) = failure {
            links.fail(node, &format!("write failed: {e}"));
            return;
        }
        let want = !link.unsent.is_empty();
        if want != link.watching_writes {
            let writable = raw::REDISMODULE_EVENTLOOP_WRITABLE as c_int;
            if want {
                watch(link, writable);
            } else {
                // SAFETY: the fd is the link's open socket.
                unsafe { rm!(RedisModule_EventLoopDel)(link.stream.as_raw_fd(), writable) };
            }
            link.watching_writes = want;
        }
    });
    arm_delivery();
}

fn write_some(link: &mut Link) -> std::io::Result<()> {
    let mut written = 0;
    while written < link.unsent.len() {
        match link.stream.write(&link.unsent[written..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    link.unsent.drain(..written);
    Ok(())
}

/// The event loop's callback for a link's socket.
unsafe extern "C" fn on_io(_fd: c_int, data: *mut c_void, mask: c_int) {
    let ctx = MODULE_CTX.with(Cell::get);
    guard(ctx, "link-io", || {
        let number = data as usize;
        let Some(node) = LINKS.with(|l| l.borrow().numbers.get(&number).copied()) else {
            return;
        };
        if mask & raw::REDISMODULE_EVENTLOOP_WRITABLE as c_int != 0 {
            writable(&node);
        }
        if mask & raw::REDISMODULE_EVENTLOOP_READABLE as c_int != 0 {
            readable(&node);
        }
        arm_delivery();
    });
}

/// A connect that finished (or failed), or room to write.
fn writable(node: &NodeId) {
    let connected = LINKS.with(|l| {
        let mut links = l.borrow_mut();
        let link = links.by_node.get_mut(node)?;
        if link.connected {
            return Some(true);
        }
        match link.stream.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => {
                let why = format!("cannot connect to {}: {e}", link.addr);
                links.fail(node, &why);
                return None;
            }
        }
        link.connected = true;
        if !watch(link, raw::REDISMODULE_EVENTLOOP_READABLE as c_int) {
            links.fail(node, "the event loop refused the link's socket");
            return None;
        }
        links.logged.remove(node);
        Some(true)
    });
    if connected.is_some() {
        flush(node);
    }
}

/// Reads what arrived and hands over every whole reply.
fn readable(node: &NodeId) {
    LINKS.with(|l| {
        let mut links = l.borrow_mut();
        let Some(link) = links.by_node.get_mut(node) else {
            return;
        };
        let (answers, failure) = read_replies(link);
        let answers = answers.into_iter().map(|a| Delivery::Answer(*node, a));
        links.deliveries.extend(answers);
        if let Some(why) = failure {
            links.fail(node, &why);
        }
    });
}

/// Reads all that is there: the answers it completes and, when the link must close, why.
fn read_replies(link: &mut Link) -> (Vec<Vec<u8>>, Option<String>) {
    let mut closed = read_available(link);
    let mut answers = Vec::new();
    let mut at = 0;
    while closed.is_none() || at < link.received.len() {
        let (reply, used) = match resp::parse(&link.received[at..], MAX_REPLY) {
            Parsed::Incomplete => break,
            Parsed::Invalid => {
                closed = Some("the master sent a reply the link cannot read".to_string());
                break;
            }
            Parsed::Reply(reply, used) => (reply, used),
        };
        at += used;
        match (link.awaited.pop_front(), reply) {
            (Some(Awaited::Handshake), RespReply::Error(text)) => {
                closed = Some(String::from_utf8_lossy(&text).into_owned());
                break;
            }
            (Some(Awaited::Handshake), _) => {}
            (Some(Awaited::Request(_)), RespReply::Bulk(Some(bytes))) => answers.push(bytes),
            (Some(Awaited::Request(id)), reply) => {
                // Back in line: the link closes and the request goes over the bus.
                link.awaited.push_front(Awaited::Request(id));
                closed = Some(format!(
                    "{} answered {}",
                    String::from_utf8_lossy(GATHER_COMMAND),
                    describe(&reply)
                ));
                break;
            }
            (None, _) => {
                closed = Some("the master sent a reply nobody asked for".to_string());
                break;
            }
        }
    }
    link.received.drain(..at);
    (answers, closed)
}

/// Reads until the socket has nothing more (or a reply's worth is buffered); Some(why) when the
/// link is finished.
fn read_available(link: &mut Link) -> Option<String> {
    let mut buf = [0u8; READ_CHUNK];
    while link.received.len() <= MAX_REPLY {
        match link.stream.read(&mut buf) {
            Ok(0) => return Some("the master closed the link".to_string()),
            Ok(n) => link.received.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Some(format!("read failed: {e}")),
        }
    }
    None
}

fn describe(reply: &RespReply) -> String {
    match reply {
        RespReply::Error(text) => String::from_utf8_lossy(text).into_owned(),
        RespReply::Simple(_) => "a status".to_string(),
        RespReply::Integer(_) => "an integer".to_string(),
        RespReply::Bulk(None) => "nil".to_string(),
        RespReply::Bulk(Some(_)) => "a string".to_string(),
    }
}

/// Hands every delivery to the gather, from a timer run at once after the I/O.
static DELIVER: Job = Job::once("link-deliver", |ctx, _| {
    let deliveries = LINKS.with(|l| std::mem::take(&mut l.borrow_mut().deliveries));
    let Some(handler) = HANDLER.with(Cell::get) else {
        return;
    };
    for delivery in deliveries {
        handler(ctx, delivery);
    }
});

/// Arms the timer that hands deliveries to the gather, when there are some. A panic in a
/// handler loses only what the gather's resends over the bus recover; the timer is armed again
/// by the next delivery.
fn arm_delivery() {
    let ctx = MODULE_CTX.with(Cell::get);
    if !ctx.is_null() && LINKS.with(|l| !l.borrow().deliveries.is_empty()) {
        scheduler::arm_once(ctx, When::Now, &DELIVER);
    }
}
