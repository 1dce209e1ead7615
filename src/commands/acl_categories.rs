//! ACL categories: each command gets the categories a native command of its kind has, so that
//! `+@write +@read` (or `-@slow`, `-@dangerous`) means for the module's commands what it means for
//! the server's, plus the module's own category `@ctr`.
//!
//! What the server's module API allows, detected at load (a missing function is never a reason
//! not to load):
//! - `RedisModule_SetCommandACLCategories` (Redis 7.2 and later, Valkey): the native
//!   categories. Without it (Redis 7.0) module commands are in no category; docs/COMMANDS.md
//!   says what an operator writes instead.
//! - `RedisModule_AddACLCategory` (Redis 7.4 and later, Valkey 8.0 and later): `@ctr` too.

// Raw pointers here come from Redis itself (contexts), never from clients.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::ffi::{c_int, CStr, CString};

use redis_module::raw;

use crate::commands::CommandDef;
use crate::ffi::rm;

/// The module's own ACL category: every command of the module (`+@ctr`).
pub const MODULE_CATEGORY: &str = "ctr";

/// Which categories this server let the module give its commands (logged at load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Categories {
    /// The native ones and `@ctr`.
    NativeAndModule,
    /// The native ones only (no `RedisModule_AddACLCategory`).
    Native,
    /// None (no `RedisModule_SetCommandACLCategories`: Redis 7.0).
    Unsupported,
}

/// Adds `@ctr` where the server can (only during load). True when it is there to use.
pub fn add_module_category(ctx: *mut raw::RedisModuleCtx) -> bool {
    // SAFETY: reading a function pointer filled in by RedisModule_Init.
    let Some(add) = (unsafe { raw::RedisModule_AddACLCategory }) else {
        return false;
    };
    let Ok(name) = CString::new(MODULE_CATEGORY) else {
        return false;
    };
    // SAFETY: called from OnLoad with a live context; the name is NUL-terminated.
    unsafe { add(ctx, name.as_ptr()) == raw::REDISMODULE_OK as c_int }
}

/// The categories of a command, as the server's ACL names them (without `@`): `write` or `read`
/// as its flags say, `fast` when flagged fast and `slow` otherwise (as the server files its own
/// commands), `dangerous` for the internal commands (state the master decided: like RESTORE),
/// and the module's category when `with_module`.
pub fn categories_of(def: &CommandDef, with_module: bool) -> String {
    let flags: Vec<&[u8]> = def.flags.to_bytes().split(|&b| b == b' ').collect();
    let has = |flag: &[u8]| flags.contains(&flag);
    let mut categories = Vec::new();
    if has(b"write") {
        categories.push("write");
    }
    if has(b"readonly") {
        categories.push("read");
    }
    categories.push(if has(b"fast") { "fast" } else { "slow" });
    if def.is_internal() {
        categories.push("dangerous");
    }
    if with_module {
        categories.push(MODULE_CATEGORY);
    }
    categories.join(" ")
}

/// Gives one created command its categories; false when the server cannot (no API, or it
/// refused them).
pub fn set(ctx: *mut raw::RedisModuleCtx, def: &CommandDef, with_module: bool) -> bool {
    // SAFETY: reading a function pointer filled in by RedisModule_Init.
    let Some(set_categories) = (unsafe { raw::RedisModule_SetCommandACLCategories }) else {
        return false;
    };
    let Ok(categories) = CString::new(categories_of(def, with_module)) else {
        return false;
    };
    let name: &CStr = def.name;
    // SAFETY: called from OnLoad with a live context; the name is NUL-terminated.
    let command = unsafe { rm!(RedisModule_GetCommand)(ctx, name.as_ptr()) };
    if command.is_null() {
        return false;
    }
    // SAFETY: command is a live command of this module; the string is NUL-terminated.
    unsafe { set_categories(command, categories.as_ptr()) == raw::REDISMODULE_OK as c_int }
}

/// Gives every command of the table its categories, as far as the server allows.
pub fn set_all(ctx: *mut raw::RedisModuleCtx, defs: &[CommandDef]) -> Categories {
    // SAFETY: reading a function pointer filled in by RedisModule_Init.
    let supported = unsafe { raw::RedisModule_SetCommandACLCategories }.is_some();
    let with_module = supported && add_module_category(ctx);
    let mut all_set = supported;
    for def in defs.iter().filter(|_| supported) {
        all_set &= set(ctx, def, with_module);
    }
    let outcome = match (all_set, with_module) {
        (true, true) => Categories::NativeAndModule,
        (true, false) => Categories::Native,
        (false, _) => Categories::Unsupported,
    };
    crate::ffi::Ctx { ptr: ctx }.log_notice(match outcome {
        Categories::NativeAndModule => {
            "ctr: commands are in the ACL categories of their kind (@write/@read, @fast/@slow, \
             @dangerous for the internal ones) and in @ctr"
        }
        Categories::Native => {
            "ctr: commands are in the ACL categories of their kind (@write/@read, @fast/@slow, \
             @dangerous for the internal ones); this server cannot add @ctr"
        }
        Categories::Unsupported => {
            "ctr: this server cannot put module commands in ACL categories: grant them by name \
             (docs/COMMANDS.md, ACL)"
        }
    });
    outcome
}
