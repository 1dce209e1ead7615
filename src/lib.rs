//! redis-ctr: sharded, floored, idempotent, reconcilable and CRDT-mergeable counters as native
//! Redis data types. This file only registers the module; see `counter` (the pure core),
//! `protocol` (the spread node's pure exchange and timeout), `persist` (encodings and type
//! callbacks) and `commands` (the Redis glue).

pub mod command_info;
pub mod commands;
pub mod config;
pub mod counter;
pub mod ffi;
/// Property checks for the fuzz targets in tests/fuzz and their regression tests.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod guard;
pub mod memsize;
pub mod metrics;
pub mod persist;
pub mod pncounter;
pub mod protocol;
pub mod runtime;

#[cfg(all(feature = "module", not(test)))]
mod module {
    use redis_module::{raw, redis_module, Context, RedisString, Status};

    use crate::persist::ctr_type::CTR_TYPE;
    use crate::persist::pnc_type::PNC_TYPE;

    fn init(ctx: &Context, args: &[RedisString]) -> Status {
        match setup(ctx, args) {
            Ok(()) => Status::Ok,
            Err(e) => {
                ctx.log_warning(&format!("ctr: {e}").replace('%', "%%"));
                Status::Err
            }
        }
    }

    fn setup(ctx: &Context, args: &[RedisString]) -> Result<(), String> {
        let missing = crate::ffi::missing_apis();
        if !missing.is_empty() {
            return Err(format!("this server lacks {}", missing.join(", ")));
        }
        // HANDLE_IO_ERRORS: without it, a truncated or corrupt RESTORE payload aborts the server
        // instead of failing the command. NO_IMPLICIT_SIGNAL_MODIFIED: a key opened for writing
        // is not reported modified on close; each write that changes something says so itself
        // (`Ctx::key_changed`), so a duplicate or refused write leaves `WATCH` holding.
        // Valkey 9 (HANDLE_ATOMIC_SLOT_MIGRATION): the module handles atomic slot migration
        // (`runtime::slot_migration`); without the declaration a loaded module switches it off
        // for the whole cluster. Added only where the server lists the option.
        crate::runtime::slot_migration::detect();
        let options = raw::ModuleOptions::HANDLE_IO_ERRORS.bits()
            | raw::ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED.bits()
            | crate::runtime::slot_migration::module_options();
        // SAFETY: ctx is the live load context; every supported server has the API.
        if let Some(set) = unsafe { raw::RedisModule_SetModuleOptions } {
            // SAFETY: as above.
            unsafe { set(ctx.ctx, options) };
        }
        crate::guard::install_panic_hook();
        crate::config::register(ctx, args)?;
        let hide_internal =
            !crate::config::EXPOSE_INTERNAL.load(std::sync::atomic::Ordering::Relaxed);
        let internal = crate::commands::register(ctx.ctx, hide_internal)?;
        ctx.log_notice(match (internal, hide_internal) {
            (crate::commands::InternalCommands::Hidden, _) => {
                "ctr: CTR.APPLY, CTR.STEP, CTR.SETSTATE, PNC.APPLY and PNC.SETSTATE are internal commands"
            }
            (crate::commands::InternalCommands::Visible, true) => {
                "ctr: CTR.APPLY, CTR.STEP, CTR.SETSTATE, PNC.APPLY and PNC.SETSTATE are listed as ordinary \
                 commands (this server has no internal flag); the module refuses them to clients"
            }
            (crate::commands::InternalCommands::Visible, false) => {
                "ctr: CTR.APPLY, CTR.STEP, CTR.SETSTATE, PNC.APPLY and PNC.SETSTATE are open to every client \
                 (expose-internal-commands yes)"
            }
        });
        crate::runtime::sweep::start(ctx);
        Ok(())
    }

    redis_module! {
        name: "ctr",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [CTR_TYPE, PNC_TYPE],
        init: init,
        commands: [],
    }
}
