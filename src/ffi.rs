//! The thin, unsafe edge between the module and the Redis module API: argument access, key
//! access, replies, replication and notifications. Everything above it is safe Rust.

// Raw pointers here come from Redis itself (contexts, argv, keys), never from clients.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::borrow::Cow;
use std::ffi::{c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::raw;

/// Calls a Redis module API function. Every function used here is checked for presence when
/// the module loads (see [`missing_apis`]), so the fallback is unreachable in practice; it
/// panics (caught by the command dispatcher) rather than invoking undefined behaviour.
macro_rules! rm {
    ($name:ident) => {{
        // SAFETY: reading a function pointer that Redis filled in at module init.
        #[allow(unused_unsafe)]
        let f = match unsafe { redis_module::raw::$name } {
            Some(f) => f,
            None => $crate::ffi::api_missing(stringify!($name)),
        };
        f
    }};
}
pub(crate) use rm;

#[cold]
pub fn api_missing(name: &str) -> ! {
    panic!("Redis module API {name} is not available on this server")
}

/// Names of the API functions the module needs that this server lacks.
pub fn missing_apis() -> Vec<&'static str> {
    macro_rules! check {
        ($($name:ident),* $(,)?) => {{
            let mut missing = Vec::new();
            $(
                // SAFETY: reading a function pointer filled in by RedisModule_Init.
                let f = unsafe { raw::$name };
                if f.is_none() {
                    missing.push(stringify!($name));
                }
            )*
            missing
        }};
    }
    check!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_ModuleTypeReplaceValue,
        RedisModule_StringPtrLen,
        RedisModule_ReplicateVerbatim,
        RedisModule_Replicate,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_SignalModifiedKey,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithMap,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_ReplyWithSimpleString,
        RedisModule_EmitAOF,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPosWithFlags,
        RedisModule_Milliseconds,
        RedisModule_GetContextFlags,
        RedisModule_SetAbsExpire,
        RedisModule_GetAbsExpire,
        RedisModule_SetExpire,
        RedisModule_SaveStringBuffer,
        RedisModule_LoadStringBuffer,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestEndSequence,
        RedisModule_CreateCommand,
        RedisModule_ValueLength,
        RedisModule_Call,
        RedisModule_GetRandomBytes,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_Log,
        RedisModule_FreeCallReply,
        RedisModule_CallReplyType,
        RedisModule_CallReplyInteger,
        RedisModule_CallReplyLength,
        RedisModule_CallReplyArrayElement,
        RedisModule_CallReplyStringPtr,
        RedisModule_GetMyClusterID,
        RedisModule_SendClusterMessage,
        RedisModule_RegisterClusterMessageReceiver,
        RedisModule_SubscribeToKeyspaceEvents,
        RedisModule_BlockClient,
        RedisModule_UnblockClient,
        RedisModule_SetDisconnectCallback,
        RedisModule_GetBlockedClientPrivateData,
        RedisModule_GetBlockedClientHandle,
        RedisModule_Scan,
        RedisModule_ScanCursorCreate,
        RedisModule_ScanCursorRestart,
        RedisModule_SelectDb,
        RedisModule_GetSelectedDb,
        RedisModule_CreateTimer,
        RedisModule_GetSelectedDb,
        RedisModule_GetKeyNameFromIO,
        RedisModule_GetDbIdFromIO,
        RedisModule_GetKeyNameFromOptCtx,
        RedisModule_GetDbIdFromOptCtx,
        RedisModule_SubscribeToServerEvent,
        RedisModule_ScanCursorDestroy,
        RedisModule_AvoidReplicaTraffic,
        RedisModule_EventLoopAdd,
        RedisModule_EventLoopDel,
        RedisModule_GetDetachedThreadSafeContext,
    )
}

pub type RawString = *mut raw::RedisModuleString;

/// Random bytes from the server's own generator.
pub fn random_bytes() -> [u8; 8] {
    let mut bytes = [0u8; 8];
    // SAFETY: writes exactly bytes.len() bytes into the buffer.
    unsafe { rm!(RedisModule_GetRandomBytes)(bytes.as_mut_ptr(), bytes.len()) };
    bytes
}

/// The bytes of a Redis string. Valid while the string lives (the command's arguments live for
/// the whole command call).
pub fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: s is a live RedisModuleString; StringPtrLen returns a pointer to len bytes.
    unsafe {
        let ptr = rm!(RedisModule_StringPtrLen)(s, &mut len);
        if ptr.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(ptr.cast::<u8>(), len)
    }
}

/// Set when the context flags last showed a primary that is not loading; cleared by the
/// role-change and loading server events ([`forget_role`]), and never set while an atomic slot
/// import runs here ([`set_importing`]). While it holds, no command can be replayed (from a
/// master link, the AOF or a slot import), so the hot writes need not ask the flags:
/// `RM_GetContextFlags` computes every one of them, about 130 instructions per call.
static KNOWN_PRIMARY: AtomicBool = AtomicBool::new(false);

/// True when this server is a primary that is not loading, as last seen (see [`KNOWN_PRIMARY`]).
pub fn known_primary() -> bool {
    KNOWN_PRIMARY.load(Ordering::Relaxed)
}

/// True when context flags say the running command is a replay, which applies what a master
/// decided and decides nothing itself: sent by our master, loaded from the AOF, or run by the
/// client of an atomic slot import (Redis 8.4+ and Valkey 9 mark that client as a master's:
/// `REPLICATED`; Valkey also sets its own `SLOT_IMPORT_CLIENT` flag). No client a user opens
/// ever carries either flag.
pub fn replayed(flags: u32) -> bool {
    flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
}

/// The server's role or loading state changed: the next command asks the flags again.
pub fn forget_role() {
    KNOWN_PRIMARY.store(false, Ordering::Relaxed);
}

/// Set while this primary imports slots by atomic slot migration: the import's client runs on
/// a primary the commands the slots' source decided (its snapshot, then the writes made there
/// meanwhile), so a primary's commands may be replays then, and every command asks the flags
/// ([`KNOWN_PRIMARY`] is not trusted): a replayed write (a verbatim `CTR.ADD` or `PNC.ADD`)
/// must decide nothing there. (The internal commands read the flags afresh anyway: with the
/// shortcut Valkey 9.1.2 refused the import's `CTR.SETSTATE` and failed the migration.)
static IMPORTING: AtomicBool = AtomicBool::new(false);

/// An atomic slot import started (true) or every one ended (false) on this server.
pub fn set_importing(importing: bool) {
    IMPORTING.store(importing, Ordering::Relaxed);
    if importing {
        forget_role();
    }
}

/// True while the server pauses writes (`CLIENT PAUSE WRITE`, a manual failover, the handoff
/// of an atomic slot migration): what it still runs is not to be sent to replicas, nor, on a
/// slot migration's source, to the slots' new master.
pub fn writes_paused() -> bool {
    // SAFETY: plain API call, no context needed.
    unsafe { rm!(RedisModule_AvoidReplicaTraffic)() != 0 }
}

/// A command's arguments (argv[0] is the command name).
pub struct Args<'a> {
    argv: &'a [RawString],
}

impl<'a> Args<'a> {
    /// # Safety
    /// argv must point to argc live strings for the lifetime `'a`.
    pub unsafe fn new(argv: *mut RawString, argc: c_int) -> Self {
        let argv = if argv.is_null() || argc <= 0 {
            &[][..]
        } else {
            // SAFETY: per the caller's contract.
            unsafe { std::slice::from_raw_parts(argv, argc as usize) }
        };
        Args { argv }
    }

    pub fn len(&self) -> usize {
        self.argv.len()
    }

    pub fn is_empty(&self) -> bool {
        self.argv.is_empty()
    }

    pub fn raw(&self, i: usize) -> RawString {
        self.argv[i]
    }

    pub fn bytes(&self, i: usize) -> &'a [u8] {
        string_bytes(self.argv[i])
    }

    /// Runs `f` on the arguments from `from` on, as byte slices, without allocating when there
    /// are few of them (every option form of every command).
    pub fn with_words<R>(&self, from: usize, f: impl FnOnce(&[&'a [u8]]) -> R) -> R {
        const INLINE: usize = 16;
        let n = self.argv.len().saturating_sub(from);
        if n == 0 {
            return f(&[]); // the commonest call of an option-taking command: no array to fill
        }
        if n <= INLINE {
            let mut words: [&[u8]; INLINE] = [&[]; INLINE];
            for (slot, i) in words.iter_mut().zip(from..self.argv.len()) {
                *slot = self.bytes(i);
            }
            f(&words[..n])
        } else {
            let words: Vec<&[u8]> = (from..self.argv.len()).map(|i| self.bytes(i)).collect();
            f(&words)
        }
    }
}

/// What a command replies. Built by the handler, sent by the dispatcher.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Integer(i64),
    Null,
    Ok,
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    /// Two integers as an array, without allocating one (`CTR.INCREX`'s `[value, applied]`).
    Pair(i64, i64),
    /// A RESP3 map; the server flattens it into an array for RESP2 clients.
    Map(Vec<(&'static str, Reply)>),
    /// Nothing now: the client is blocked and gets its reply when it is unblocked.
    Blocked,
}

/// A command error; its text starts with the error code (`ERR`, `WRONGTYPE`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError(pub Cow<'static, str>);

impl CommandError {
    pub const fn fixed(msg: &'static str) -> Self {
        CommandError(Cow::Borrowed(msg))
    }
}

/// What a client gets when the module hit a bug (a contained panic, a state that cannot be).
pub const INTERNAL_ERROR: CommandError =
    CommandError::fixed("ERR internal error in redis-ctr (a bug: please report it)");

pub const WRONG_TYPE: CommandError =
    CommandError::fixed("WRONGTYPE Operation against a key holding the wrong kind of value");

/// A key name as a server string, freed on drop.
pub struct KeyName {
    ctx: Ctx,
    pub raw: RawString,
}

impl KeyName {
    pub fn new(ctx: Ctx, name: &[u8]) -> KeyName {
        // SAFETY: ctx is live; freed on drop.
        let raw =
            unsafe { rm!(RedisModule_CreateString)(ctx.ptr, name.as_ptr().cast(), name.len()) };
        KeyName { ctx, raw }
    }
}

impl Drop for KeyName {
    fn drop(&mut self) {
        // SAFETY: made in `new`, freed once.
        unsafe { rm!(RedisModule_FreeString)(self.ctx.ptr, self.raw) };
    }
}

pub type CommandResult = Result<Reply, CommandError>;

/// The command-call context.
#[derive(Clone, Copy)]
pub struct Ctx {
    pub ptr: *mut raw::RedisModuleCtx,
}

impl Ctx {
    #[inline]
    pub fn reply(&self, reply: &Reply) {
        let ctx = self.ptr;
        // SAFETY: ctx is the live context of the running command.
        unsafe {
            match reply {
                Reply::Integer(v) => self.reply_integer(*v),
                Reply::Null => {
                    rm!(RedisModule_ReplyWithNull)(ctx);
                }
                Reply::Ok => {
                    rm!(RedisModule_ReplyWithSimpleString)(ctx, c"OK".as_ptr());
                }
                Reply::Bulk(b) => {
                    rm!(RedisModule_ReplyWithStringBuffer)(ctx, b.as_ptr().cast(), b.len());
                }

                Reply::Array(items) => {
                    rm!(RedisModule_ReplyWithArray)(ctx, items.len() as _);
                    items.iter().for_each(|item| self.reply(item));
                }
                Reply::Pair(a, b) => {
                    rm!(RedisModule_ReplyWithArray)(ctx, 2);
                    self.reply_integer(*a);
                    self.reply_integer(*b);
                }
                Reply::Blocked => {}
                Reply::Map(fields) => {
                    rm!(RedisModule_ReplyWithMap)(ctx, fields.len() as _);
                    for (name, value) in fields {
                        rm!(RedisModule_ReplyWithStringBuffer)(
                            ctx,
                            name.as_ptr().cast(),
                            name.len(),
                        );
                        self.reply(value);
                    }
                }
            }
        }
    }

    pub fn reply_integer(&self, v: i64) {
        // SAFETY: ctx is the live context of the running command.
        unsafe {
            rm!(RedisModule_ReplyWithLongLong)(self.ptr, v);
        }
    }

    pub fn reply_error(&self, err: &CommandError) {
        // Error text may carry client bytes: never let a NUL cut it short or panic.
        let text: Vec<u8> = err
            .0
            .bytes()
            .map(|b| if b == 0 { b' ' } else { b })
            .collect();
        let msg = CString::new(text).unwrap_or_default();
        // SAFETY: ctx is live; msg is NUL-terminated.
        unsafe {
            rm!(RedisModule_ReplyWithError)(self.ptr, msg.as_ptr());
        }
    }

    /// Propagates the command exactly as the client sent it to replicas and the AOF.
    pub fn replicate_verbatim(&self) {
        // SAFETY: ctx is live.
        unsafe {
            rm!(RedisModule_ReplicateVerbatim)(self.ptr);
        }
    }

    /// Propagates one effect command `cmd key payload` to replicas and the AOF. False when Redis
    /// refused it.
    pub fn replicate_effect(&self, cmd: &CStr, key: RawString, payload: &[u8]) -> bool {
        // SAFETY: ctx and key are live; "sb" takes a RedisModuleString then (ptr, len).
        let status = unsafe {
            rm!(RedisModule_Replicate)(
                self.ptr,
                cmd.as_ptr(),
                c"sb".as_ptr(),
                key,
                payload.as_ptr(),
                payload.len(),
            )
        };
        status == raw::REDISMODULE_OK as c_int
    }

    /// The server's wall clock, unix ms, at the kernel's coarse resolution (a few ms at most):
    /// plenty for token windows, buckets and rate seconds, and several times cheaper than
    /// `RedisModule_Milliseconds` on the hot path.
    pub fn now_ms(&self) -> i64 {
        coarse_now_ms()
    }

    /// The server's clock at full resolution (for TTL deadlines).
    pub fn precise_now_ms(&self) -> i64 {
        // SAFETY: plain API call.
        unsafe { rm!(RedisModule_Milliseconds)() }
    }
}

/// [`Ctx::now_ms`], for code that reads the clock without a context (a windowed counter's
/// value in a read).
pub fn coarse_now_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } == 0 {
        ts.tv_sec.saturating_mul(1000) + ts.tv_nsec / 1_000_000
    } else {
        // SAFETY: plain API call.
        unsafe { rm!(RedisModule_Milliseconds)() }
    }
}

impl Ctx {
    /// True when the running command was sent by our master or is being replayed from the AOF:
    /// such a command must apply what it says and decide nothing on its own.
    pub fn is_replaying(&self) -> bool {
        if known_primary() {
            return false;
        }
        replayed(self.flags())
    }

    /// True when the running command's client may be blocked: not inside MULTI/EXEC or a
    /// script, nor where the server denies blocking.
    pub fn can_block(&self) -> bool {
        self.flags()
            & (raw::REDISMODULE_CTX_FLAGS_MULTI
                | raw::REDISMODULE_CTX_FLAGS_LUA
                | raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING)
            == 0
    }

    /// The server's context flags (`REDISMODULE_CTX_FLAGS_*`).
    pub fn flags(&self) -> u32 {
        // SAFETY: ctx is live.
        let flags = unsafe { rm!(RedisModule_GetContextFlags)(self.ptr) as u32 };
        let not_local = raw::REDISMODULE_CTX_FLAGS_SLAVE
            | raw::REDISMODULE_CTX_FLAGS_LOADING
            | raw::REDISMODULE_CTX_FLAGS_REPLICATED;
        if flags & raw::REDISMODULE_CTX_FLAGS_MASTER != 0
            && flags & not_local == 0
            && !IMPORTING.load(Ordering::Relaxed)
        {
            KNOWN_PRIMARY.store(true, Ordering::Relaxed);
        }
        flags
    }

    /// Propagates `cmd key args...` to replicas and the AOF (the effect of a command whose
    /// outcome the replicas could not compute themselves). False when the server refused.
    pub fn replicate(&self, cmd: &CStr, key: RawString, args: &[&[u8]]) -> bool {
        // SAFETY: ctx is live; every created string is freed after Replicate took its own
        // references; "sv" takes a RedisModuleString then (RedisModuleString**, count).
        unsafe {
            let create =
                |a: &&[u8]| rm!(RedisModule_CreateString)(self.ptr, a.as_ptr().cast(), a.len());
            // Up to 4 arguments without a heap allocation for the vector.
            let mut small = [std::ptr::null_mut(); 4];
            let mut large = Vec::new();
            let argv: &mut [RawString] = if args.len() <= small.len() {
                for (slot, a) in small.iter_mut().zip(args) {
                    *slot = create(a);
                }
                &mut small[..args.len()]
            } else {
                large.extend(args.iter().map(create));
                &mut large
            };
            let status = rm!(RedisModule_Replicate)(
                self.ptr,
                cmd.as_ptr(),
                c"sv".as_ptr(),
                key,
                argv.as_mut_ptr(),
                argv.len(),
            );
            for s in argv.iter() {
                rm!(RedisModule_FreeString)(self.ptr, *s);
            }
            status == raw::REDISMODULE_OK as c_int
        }
    }

    /// Writes a warning to the server log. The text is passed as an argument, never as the
    /// printf format.
    pub fn log_warning(&self, msg: &str) {
        self.log(c"warning", msg);
    }

    /// Writes a notice (the default log level shows it) to the server log.
    pub fn log_notice(&self, msg: &str) {
        self.log(c"notice", msg);
    }

    fn log(&self, level: &CStr, msg: &str) {
        let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: ctx is live; "%s" consumes exactly one C string.
        unsafe {
            rm!(RedisModule_Log)(self.ptr, level.as_ptr(), c"%s".as_ptr(), msg.as_ptr());
        }
    }

    /// Tells the server that a write changed the key: `WATCH` on it aborts (the module turns
    /// off the implicit signal on every key opened for writing, so a write that changes nothing
    /// leaves watchers alone), and a module keyspace event (class `d`, included in `A`) goes out.
    /// Call it after the key is closed: another module's event handler may touch the key.
    pub fn key_changed(&self, event: &CStr, key: RawString) {
        // SAFETY: ctx and key are live.
        unsafe { rm!(RedisModule_SignalModifiedKey)(self.ptr, key) };
        self.notify(raw::REDISMODULE_NOTIFY_MODULE, event, key);
    }

    /// The generic (`g`) `expire` event, as `SET ... EX` sends it, for a TTL set on create.
    pub fn expire_set(&self, key: RawString) {
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", key);
    }

    /// The generic (`g`) `del` event, as `DEL` sends it.
    pub fn deleted(&self, key: RawString) {
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", key);
    }

    /// The generic (`g`) `persist` event, as `PERSIST` sends it.
    pub fn persisted(&self, key: RawString) {
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"persist", key);
    }

    fn notify(&self, class: c_int, event: &CStr, key: RawString) {
        // SAFETY: ctx and key are live; event is NUL-terminated.
        unsafe {
            rm!(RedisModule_NotifyKeyspaceEvent)(self.ptr, class, event.as_ptr(), key);
        }
    }
}

/// What an opened key holds, for a given module type.
#[derive(Clone, Copy)]
pub enum KeyContent {
    Empty,
    /// A value of the requested module type (its raw value pointer).
    Mine(*mut c_void),
    Other,
}

/// An open key, closed on drop.
pub struct Key {
    kp: *mut raw::RedisModuleKey,
}

impl Key {
    pub fn open(ctx: Ctx, name: RawString, write: bool) -> Key {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: ctx and name are live.
        let kp = unsafe { rm!(RedisModule_OpenKey)(ctx.ptr, name, mode as c_int) };
        Key { kp }
    }

    pub fn content(&self, mtype: *mut raw::RedisModuleType) -> KeyContent {
        if self.kp.is_null() {
            return KeyContent::Empty;
        }
        // SAFETY: kp is an open key. The module type is asked first: it is the common case and
        // answers null for any other kind of key.
        unsafe {
            if rm!(RedisModule_ModuleTypeGetType)(self.kp) == mtype {
                return KeyContent::Mine(rm!(RedisModule_ModuleTypeGetValue)(self.kp));
            }
            match rm!(RedisModule_KeyType)(self.kp) as isize {
                raw::REDISMODULE_KEYTYPE_EMPTY => KeyContent::Empty,
                _ => KeyContent::Other,
            }
        }
    }

    /// Stores a new value in an empty key (opened for writing). False on failure, in which case
    /// the caller still owns `value`.
    pub fn set_value(&self, mtype: *mut raw::RedisModuleType, value: *mut c_void) -> bool {
        // SAFETY: kp is open for writing.
        unsafe {
            rm!(RedisModule_ModuleTypeSetValue)(self.kp, mtype, value)
                == raw::REDISMODULE_OK as c_int
        }
    }

    /// Swaps the value of a key that already holds `mtype`, keeping its TTL. Returns the old
    /// value, which the caller now owns; None (and nothing changed) on failure.
    pub fn replace_value(
        &self,
        mtype: *mut raw::RedisModuleType,
        value: *mut c_void,
    ) -> Option<*mut c_void> {
        let mut old = std::ptr::null_mut();
        // SAFETY: kp is open for writing.
        let status =
            unsafe { rm!(RedisModule_ModuleTypeReplaceValue)(self.kp, mtype, value, &mut old) };
        (status == raw::REDISMODULE_OK as c_int).then_some(old)
    }
}

/// The Redis types a key can hold, as far as the module reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    Set,
    SortedSet,
    Stream,
    Other,
}

impl Key {
    pub fn kind(&self) -> KeyKind {
        if self.kp.is_null() {
            return KeyKind::Empty;
        }
        // SAFETY: kp is an open key.
        match unsafe { rm!(RedisModule_KeyType)(self.kp) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_SET => KeyKind::Set,
            raw::REDISMODULE_KEYTYPE_ZSET => KeyKind::SortedSet,
            raw::REDISMODULE_KEYTYPE_STREAM => KeyKind::Stream,
            _ => KeyKind::Other,
        }
    }

    /// Elements of a set, sorted set or stream (0 when empty).
    pub fn length(&self) -> u64 {
        if self.kp.is_null() {
            return 0;
        }
        // SAFETY: kp is an open key.
        unsafe { rm!(RedisModule_ValueLength)(self.kp) as u64 }
    }

    /// Sets an absolute expiry (unix ms) on a key opened for writing that holds a value.
    pub fn set_abs_expire(&self, at_ms: i64) -> bool {
        // SAFETY: kp is open for writing.
        unsafe { rm!(RedisModule_SetAbsExpire)(self.kp, at_ms) == raw::REDISMODULE_OK as c_int }
    }
}

impl Key {
    /// The key's absolute expiry (unix ms), None without one.
    pub fn abs_expire(&self) -> Option<i64> {
        // An empty key has none; Redis 8.6 does not check (RM_GetAbsExpire reads the value
        // object, NULL for an empty key opened for writing, and crashes: redis/redis#14155).
        if self.kind() == KeyKind::Empty {
            return None;
        }
        // SAFETY: kp is an open key.
        let at = unsafe { rm!(RedisModule_GetAbsExpire)(self.kp) };
        (at != raw::REDISMODULE_NO_EXPIRE as i64).then_some(at)
    }

    /// Deletes the key (opened for writing), as `DEL` would.
    pub fn delete(&self) -> bool {
        // SAFETY: kp is open for writing.
        unsafe { rm!(RedisModule_DeleteKey)(self.kp) == raw::REDISMODULE_OK as c_int }
    }

    /// Removes the key's time to live (on a key opened for writing that holds a value).
    pub fn persist(&self) -> bool {
        // SAFETY: kp is open for writing.
        unsafe {
            rm!(RedisModule_SetExpire)(self.kp, raw::REDISMODULE_NO_EXPIRE as i64)
                == raw::REDISMODULE_OK as c_int
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.kp.is_null() {
            // SAFETY: kp was opened by us and is closed once.
            unsafe { rm!(RedisModule_CloseKey)(self.kp) }
        }
    }
}
