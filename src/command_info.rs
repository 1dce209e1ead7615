//! COMMAND INFO / COMMAND DOCS metadata through `RedisModule_SetCommandInfo`: arity, summary and
//! key specs with the right read/write flags, so `COMMAND GETKEYS`, ACL key patterns and cluster
//! clients see each command as it really is. (The crate's `#[command]` macro needs Redis 7.2.)

// Raw pointers here come from Redis itself (contexts, argv, keys), never from clients.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::c_int;

use redis_module::raw;

use crate::commands::{CommandDef, KeyAccess, KeywordKey};
use crate::ffi::rm;

/// The key-spec flags of an access kind (also the flags of `KeyAtPosWithFlags`).
pub fn key_flags(access: KeyAccess) -> u64 {
    let flags = match access {
        KeyAccess::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        KeyAccess::Update => {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        }
        KeyAccess::Overwrite => raw::REDISMODULE_CMD_KEY_OW | raw::REDISMODULE_CMD_KEY_UPDATE,
    };
    u64::from(flags)
}

fn key_spec(def: &CommandDef) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: key_flags(def.access),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 {
                pos: def.keys.first,
            },
        },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
        fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
            range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                // Relative to the first key: 0 = just it, -1 = through the last argument.
                lastkey: if def.keys.last < 0 {
                    def.keys.last
                } else {
                    def.keys.last - def.keys.first
                },
                keystep: def.keys.step,
                limit: 0,
            },
        },
    }
}

/// A key that only the command itself can find (see [`KeywordKey`]): an "unknown" key spec
/// carrying its access flags. Any unknown spec makes the server ask the command
/// (`getkeys-api`) for the keys instead of reading the specs, for every use: COMMAND GETKEYS,
/// ACL key patterns and cluster routing.
fn keyword_spec(k: &KeywordKey) -> raw::RedisModuleCommandKeySpec {
    raw::RedisModuleCommandKeySpec {
        notes: c"present only after its keyword (e.g. FROM): the command finds it (getkeys-api)"
            .as_ptr(),
        flags: key_flags(k.access),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_UNKNOWN,
        // SAFETY: plain data; the search arguments are unused for an unknown spec.
        bs: unsafe { std::mem::zeroed() },
        find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_UNKNOWN,
        // SAFETY: as above.
        fk: unsafe { std::mem::zeroed() },
    }
}

/// An all-zero key spec terminates the array.
fn terminator() -> raw::RedisModuleCommandKeySpec {
    // SAFETY: the struct is plain data for which all-zero is the documented terminator.
    unsafe { std::mem::zeroed() }
}

pub fn set(ctx: *mut raw::RedisModuleCtx, def: &CommandDef) -> Result<(), String> {
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let mut specs: Vec<_> = (def.keys.first > 0)
        .then(|| key_spec(def))
        .into_iter()
        .collect();
    specs.extend(def.keyword_keys.iter().map(keyword_spec));
    specs.push(terminator());
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: def.summary.as_ptr(),
        complexity: def.complexity.as_ptr(),
        since: def.since.as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: def.arity,
        key_specs: specs.as_mut_ptr(),
        args: std::ptr::null_mut(),
    };
    // SAFETY: Redis copies everything it keeps from `info` before returning.
    let status = unsafe {
        let command = rm!(RedisModule_GetCommand)(ctx, def.name.as_ptr());
        if command.is_null() {
            return Err(format!("command {:?} not found", def.name));
        }
        rm!(RedisModule_SetCommandInfo)(command, &info)
    };
    if status != raw::REDISMODULE_OK as c_int {
        return Err(format!("SetCommandInfo failed for {:?}", def.name));
    }
    Ok(())
}
