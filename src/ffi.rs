//! The thin, unsafe edge between the module and the Redis module API: argument access, key
//! access, replies, replication and notifications. Everything above it is safe Rust.

// Raw pointers here come from Redis itself (contexts, argv, keys), never from clients.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::borrow::Cow;
use std::ffi::{c_int, c_void, CStr, CString};

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
    // SAFETY: reading function pointers filled in by RedisModule_Init.
    let present: [(&str, bool); 25] = unsafe {
        [
            ("OpenKey", {
                let f = raw::RedisModule_OpenKey;
                f.is_some()
            }),
            ("CloseKey", {
                let f = raw::RedisModule_CloseKey;
                f.is_some()
            }),
            ("KeyType", {
                let f = raw::RedisModule_KeyType;
                f.is_some()
            }),
            ("ModuleTypeGetType", {
                let f = raw::RedisModule_ModuleTypeGetType;
                f.is_some()
            }),
            ("ModuleTypeGetValue", {
                let f = raw::RedisModule_ModuleTypeGetValue;
                f.is_some()
            }),
            ("ModuleTypeSetValue", {
                let f = raw::RedisModule_ModuleTypeSetValue;
                f.is_some()
            }),
            ("ModuleTypeReplaceValue", {
                let f = raw::RedisModule_ModuleTypeReplaceValue;
                f.is_some()
            }),
            ("StringPtrLen", {
                let f = raw::RedisModule_StringPtrLen;
                f.is_some()
            }),
            ("ReplicateVerbatim", {
                let f = raw::RedisModule_ReplicateVerbatim;
                f.is_some()
            }),
            ("NotifyKeyspaceEvent", {
                let f = raw::RedisModule_NotifyKeyspaceEvent;
                f.is_some()
            }),
            ("ReplyWithLongLong", {
                let f = raw::RedisModule_ReplyWithLongLong;
                f.is_some()
            }),
            ("ReplyWithError", {
                let f = raw::RedisModule_ReplyWithError;
                f.is_some()
            }),
            ("ReplyWithArray", {
                let f = raw::RedisModule_ReplyWithArray;
                f.is_some()
            }),
            ("ReplyWithMap", {
                let f = raw::RedisModule_ReplyWithMap;
                f.is_some()
            }),
            ("ReplyWithNull", {
                let f = raw::RedisModule_ReplyWithNull;
                f.is_some()
            }),
            ("ReplyWithStringBuffer", {
                let f = raw::RedisModule_ReplyWithStringBuffer;
                f.is_some()
            }),
            ("ReplyWithSimpleString", {
                let f = raw::RedisModule_ReplyWithSimpleString;
                f.is_some()
            }),
            ("EmitAOF", {
                let f = raw::RedisModule_EmitAOF;
                f.is_some()
            }),
            ("GetCommand", {
                let f = raw::RedisModule_GetCommand;
                f.is_some()
            }),
            ("SetCommandInfo", {
                let f = raw::RedisModule_SetCommandInfo;
                f.is_some()
            }),
            ("Replicate", {
                let f = raw::RedisModule_Replicate;
                f.is_some()
            }),
            ("GetContextFlags", {
                let f = raw::RedisModule_GetContextFlags;
                f.is_some()
            }),
            ("GetRandomBytes", {
                let f = raw::RedisModule_GetRandomBytes;
                f.is_some()
            }),
            ("CreateString", {
                let f = raw::RedisModule_CreateString;
                f.is_some()
            }),
            ("FreeString", {
                let f = raw::RedisModule_FreeString;
                f.is_some()
            }),
        ]
    };
    present
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| *name)
        .collect()
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
}

/// What a command replies. Built by the handler, sent by the dispatcher.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Integer(i64),
    Null,
    Ok,
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    /// A RESP3 map; the server flattens it into an array for RESP2 clients.
    Map(Vec<(&'static str, Reply)>),
}

/// A command error; its text starts with the error code (`ERR`, `WRONGTYPE`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError(pub Cow<'static, str>);

impl CommandError {
    pub const fn fixed(msg: &'static str) -> Self {
        CommandError(Cow::Borrowed(msg))
    }
}

pub const WRONG_TYPE: CommandError =
    CommandError::fixed("WRONGTYPE Operation against a key holding the wrong kind of value");

pub type CommandResult = Result<Reply, CommandError>;

/// The command-call context.
#[derive(Clone, Copy)]
pub struct Ctx {
    pub ptr: *mut raw::RedisModuleCtx,
}

impl Ctx {
    pub fn reply(&self, reply: &Reply) {
        let ctx = self.ptr;
        // SAFETY: ctx is the live context of the running command.
        unsafe {
            match reply {
                Reply::Integer(v) => {
                    rm!(RedisModule_ReplyWithLongLong)(ctx, *v);
                }
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

    /// The server's context flags (`REDISMODULE_CTX_FLAGS_*`).
    pub fn flags(&self) -> u32 {
        // SAFETY: ctx is live.
        unsafe { rm!(RedisModule_GetContextFlags)(self.ptr) as u32 }
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
        let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: ctx is live; "%s" consumes exactly one C string.
        unsafe {
            rm!(RedisModule_Log)(self.ptr, c"warning".as_ptr(), c"%s".as_ptr(), msg.as_ptr());
        }
    }

    /// Emits a module keyspace event (class `d`, included in `A`).
    pub fn notify(&self, event: &CStr, key: RawString) {
        // SAFETY: ctx and key are live; event is NUL-terminated.
        unsafe {
            rm!(RedisModule_NotifyKeyspaceEvent)(
                self.ptr,
                raw::REDISMODULE_NOTIFY_MODULE,
                event.as_ptr(),
                key,
            );
        }
    }
}

/// What an opened key holds, for a given module type.
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
        // SAFETY: kp is an open key.
        unsafe {
            match rm!(RedisModule_KeyType)(self.kp) as isize {
                raw::REDISMODULE_KEYTYPE_EMPTY => KeyContent::Empty,
                raw::REDISMODULE_KEYTYPE_MODULE
                    if rm!(RedisModule_ModuleTypeGetType)(self.kp) == mtype =>
                {
                    KeyContent::Mine(rm!(RedisModule_ModuleTypeGetValue)(self.kp))
                }
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

impl Drop for Key {
    fn drop(&mut self) {
        if !self.kp.is_null() {
            // SAFETY: kp was opened by us and is closed once.
            unsafe { rm!(RedisModule_CloseKey)(self.kp) }
        }
    }
}
