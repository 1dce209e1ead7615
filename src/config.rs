//! Module configs (`CONFIG GET/SET ctr.*`, load arguments, config file), validated by the server
//! against the ranges declared here. The core never reads these statics: commands take a
//! [`Settings`] snapshot and pass it down, so the core stays pure.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// (name without the `ctr.` prefix, holder, default, min, max)
pub type I64Config = (&'static str, &'static AtomicI64, i64, i64, i64);

const DAY_MS: i64 = 86_400_000;

pub static PROMOTE_THRESHOLD: AtomicI64 = AtomicI64::new(10_000);
pub static MAX_SHARDS: AtomicI64 = AtomicI64::new(16);
pub static TOKEN_WINDOW_MS: AtomicI64 = AtomicI64::new(3_600_000);
pub static TOKEN_MAX_FUTURE_MS: AtomicI64 = AtomicI64::new(60_000);
pub static BUCKET_MS: AtomicI64 = AtomicI64::new(60_000);
pub static BUCKET_RETENTION_MS: AtomicI64 = AtomicI64::new(3_600_000);
pub static SETTLE_MS: AtomicI64 = AtomicI64::new(60_000);
/// Spread counters: how long a gathered read waits for other masters, and how old their
/// holders' values may be when served from the home's cache (0 = never cached).
pub static GATHER_TIMEOUT_MS: AtomicI64 = AtomicI64::new(1000);
pub static GATHER_CACHE_MS: AtomicI64 = AtomicI64::new(0);
/// Auto-spread: a counter adding faster than this many adds/s (0 = never) spreads itself to
/// `SPREAD_HOLDERS` holders.
pub static SPREAD_THRESHOLD: AtomicI64 = AtomicI64::new(0);
pub static SPREAD_HOLDERS: AtomicI64 = AtomicI64::new(16);

pub static SWEEP_BUDGET: AtomicI64 = AtomicI64::new(2_000);
pub static SWEEP_INTERVAL_MS: AtomicI64 = AtomicI64::new(100);
/// Floored spread counters: how long after a refusal its home's budgets are rebalanced
/// (0 = never).
pub static REBALANCE_DELAY_MS: AtomicI64 = AtomicI64::new(20);
/// Spread counters: how long a master keeps asking other masters to delete the holders of a
/// deleted home before it gives up (counted in `ctr_collections_abandoned`).
pub static COLLECT_TIMEOUT_MS: AtomicI64 = AtomicI64::new(10_000);
/// Spread counters, the orphan audit (`runtime::spread_audit`): how long after one walk of a
/// master's keys for holders began the next one begins (0 = never), and how long a spread must
/// stay answered gone before its holders here are deleted.
pub static AUDIT_INTERVAL_MS: AtomicI64 = AtomicI64::new(60_000);
pub static ORPHAN_GRACE_MS: AtomicI64 = AtomicI64::new(600_000);
/// How long a command whose units are still travelling (a purchase whose budget is in flight,
/// `CTR.FLOOR` during folds) waits in the server before it answers `TRYAGAIN` (0 = never).
pub static PURCHASE_WAIT_MS: AtomicI64 = AtomicI64::new(200);
/// The most the masters' clocks may differ by: after taking homes over (a promotion, a restart,
/// a home loaded by `RESTORE`, `MIGRATE` or an import), a master dates its holder list changes
/// at least this far past its clock (`protocol::listing_gate`).
pub static CLOCK_SKEW_MS: AtomicI64 = AtomicI64::new(1_000);

/// Every integer config with its default and range (also the source of the docs table).
pub const I64_CONFIGS: [I64Config; 19] = [
    (
        "promote-threshold",
        &PROMOTE_THRESHOLD,
        10_000,
        1,
        1_000_000_000,
    ),
    (
        "max-shards",
        &MAX_SHARDS,
        16,
        1,
        crate::counter::MAX_SHARDS as i64,
    ),
    (
        "token-window-ms",
        &TOKEN_WINDOW_MS,
        3_600_000,
        1,
        7 * DAY_MS,
    ),
    (
        "token-max-future-ms",
        &TOKEN_MAX_FUTURE_MS,
        60_000,
        0,
        DAY_MS,
    ),
    ("bucket-ms", &BUCKET_MS, 60_000, 1, DAY_MS),
    (
        "bucket-retention-ms",
        &BUCKET_RETENTION_MS,
        3_600_000,
        1,
        30 * DAY_MS,
    ),
    ("settle-ms", &SETTLE_MS, 60_000, 0, DAY_MS),
    ("gather-timeout-ms", &GATHER_TIMEOUT_MS, 1000, 1, 60_000),
    ("gather-cache-ms", &GATHER_CACHE_MS, 0, 0, DAY_MS),
    ("spread-threshold", &SPREAD_THRESHOLD, 0, 0, 1_000_000_000),
    (
        "spread-holders",
        &SPREAD_HOLDERS,
        16,
        2,
        crate::counter::spread::MAX_HOLDERS as i64,
    ),
    // The idle sweep: work units per tick (see runtime::sweep), 0 = off.
    ("sweep-budget", &SWEEP_BUDGET, 2_000, 0, 1_000_000),
    ("sweep-interval-ms", &SWEEP_INTERVAL_MS, 100, 1, 60_000),
    ("rebalance-delay-ms", &REBALANCE_DELAY_MS, 20, 0, 60_000),
    (
        "collect-timeout-ms",
        &COLLECT_TIMEOUT_MS,
        10_000,
        1,
        3_600_000,
    ),
    ("audit-interval-ms", &AUDIT_INTERVAL_MS, 60_000, 0, DAY_MS),
    ("orphan-grace-ms", &ORPHAN_GRACE_MS, 600_000, 0, 7 * DAY_MS),
    ("purchase-wait-ms", &PURCHASE_WAIT_MS, 200, 0, 60_000),
    ("clock-skew-ms", &CLOCK_SKEW_MS, 1_000, 0, 60_000),
];

/// `ctr.track-history yes|no`: every counter keeps time buckets from its first write (so any
/// retained watermark is accepted), not only those started with `CTR.RECONCILE key START`.
pub const TRACK_HISTORY_CONFIG: &str = "track-history";
pub static TRACK_HISTORY: AtomicBool = AtomicBool::new(false);

/// Parses a yes/no load argument (the server parses `CONFIG SET` and config file values).
pub fn parse_yes_no(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

/// `ctr.expose-internal-commands` (load argument only, default no): with yes, CTR.APPLY,
/// CTR.SETSTATE, PNC.APPLY and PNC.SETSTATE are ordinary commands that any client may call,
/// even where the server could hide them (tests that forge states, or moving a state by hand).
/// With no, the module refuses them to everything but the replication stream and loading.
pub const EXPOSE_INTERNAL_CONFIG: &str = "expose-internal-commands";
pub static EXPOSE_INTERNAL: AtomicBool = AtomicBool::new(false);

/// `ctr.debug-hold-credits` (load argument only, default no; for tests): with yes, this
/// server never applies a transfer credit (nor acknowledges one), so a fold stops after its
/// holders are sealed. Tests use it to kill a master in the middle of a fold.
pub const DEBUG_HOLD_CREDITS_CONFIG: &str = "debug-hold-credits";
pub static DEBUG_HOLD_CREDITS: AtomicBool = AtomicBool::new(false);

/// `ctr.replica-id`: empty = automatic (a random id made on the first PN-counter write), else
/// the id this deployment's PN-counter writes go to. Its value lives in
/// [`crate::pncounter::identity`], which also decides what a change means.
pub const REPLICA_ID_CONFIG: &str = "replica-id";

/// Parses a `ctr.replica-id` value: None for the empty string (automatic).
pub fn parse_replica_id(
    bytes: &[u8],
) -> Result<Option<crate::pncounter::ReplicaId>, crate::pncounter::ConfiguredIdError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    crate::pncounter::ReplicaId::parse_configured(bytes).map(Some)
}

/// The string last returned for `CONFIG GET ctr.replica-id` (its text, its RedisModuleString
/// as an address): owned by the module, see `ReplicaIdConfig::get`.
#[cfg(feature = "module")]
static REPLICA_ID_STRING: std::sync::Mutex<Option<(String, usize)>> = std::sync::Mutex::new(None);

/// A string for Redis to read as a config's value: Redis copies the string a getter returns and
/// never frees it (and redis-module hands it over as is), so the module keeps owning it. One
/// string per config, replaced when the value changes; a new string per call leaked one per
/// CONFIG GET / CONFIG SET.
#[cfg(feature = "module")]
fn owned_reply_string(
    cache: &std::sync::Mutex<Option<(String, usize)>>,
    text: &str,
) -> redis_module::RedisString {
    let mut cached = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let raw = match &*cached {
        Some((held, raw)) if held == text => *raw,
        _ => {
            // SAFETY: creates a context-free string from `text`'s bytes.
            let raw = unsafe {
                crate::ffi::rm!(RedisModule_CreateString)(
                    std::ptr::null_mut(),
                    text.as_ptr().cast(),
                    text.len(),
                )
            } as usize;
            if let Some((_, old)) = cached.replace((text.to_string(), raw)) {
                // SAFETY: `old` was made above and nobody else holds it: Redis used it only
                // inside the getter call that returned it.
                unsafe { crate::ffi::rm!(RedisModule_FreeString)(std::ptr::null_mut(), old as _) };
            }
            raw
        }
    };
    // No retain: the crate passes the pointer to Redis without freeing it.
    redis_module::RedisString::from_redis_module_string(std::ptr::null_mut(), raw as _)
}

/// A plain string config (`ctr.read-link-user`, `ctr.read-link-password`, `ctr.metrics-keys`).
pub struct StringConfig {
    value: std::sync::Mutex<String>,
    #[cfg(feature = "module")]
    returned: std::sync::Mutex<Option<(String, usize)>>,
}

impl StringConfig {
    const fn new() -> StringConfig {
        StringConfig {
            value: std::sync::Mutex::new(String::new()),
            #[cfg(feature = "module")]
            returned: std::sync::Mutex::new(None),
        }
    }

    pub fn get(&self) -> String {
        self.value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[cfg(feature = "module")]
impl redis_module::configuration::ConfigurationValue<redis_module::RedisString> for StringConfig {
    fn get(
        &self,
        _ctx: &redis_module::configuration::ConfigurationContext,
    ) -> redis_module::RedisString {
        owned_reply_string(&self.returned, &StringConfig::get(self))
    }

    fn set(
        &self,
        _ctx: &redis_module::configuration::ConfigurationContext,
        val: redis_module::RedisString,
    ) -> Result<(), redis_module::RedisError> {
        let text = val.try_as_str()?.to_string();
        *self
            .value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = text;
        Ok(())
    }
}

/// `ctr.read-links yes|no`: gathers send their requests to the other masters' client ports on
/// the module's own connections (`runtime::read_links`); no: over the cluster bus only.
pub const READ_LINKS_CONFIG: &str = "read-links";
pub static READ_LINKS: AtomicBool = AtomicBool::new(true);
/// The credentials read links authenticate with (empty: none).
pub const READ_LINK_USER_CONFIG: &str = "read-link-user";
pub static READ_LINK_USER: StringConfig = StringConfig::new();
pub const READ_LINK_PASSWORD_CONFIG: &str = "read-link-password";
pub static READ_LINK_PASSWORD: StringConfig = StringConfig::new();
/// `ctr.metrics-keys`: the counters, by name and separated by spaces, whose `CTR.INFO` figures
/// docs/operations/ctr-metrics.lua exports; shown in `INFO ctr` (`ctr_watch_keys`), where the
/// script reads it. The module itself does nothing else with it.
pub const METRICS_KEYS_CONFIG: &str = "metrics-keys";
pub static METRICS_KEYS: StringConfig = StringConfig::new();

/// The holder of `ctr.replica-id` (reads and writes go through the identity).
pub struct ReplicaIdConfig;
pub static REPLICA_ID: ReplicaIdConfig = ReplicaIdConfig;

#[cfg(feature = "module")]
impl redis_module::configuration::ConfigurationValue<redis_module::RedisString>
    for ReplicaIdConfig
{
    fn get(
        &self,
        _ctx: &redis_module::configuration::ConfigurationContext,
    ) -> redis_module::RedisString {
        let identity = crate::pncounter::identity();
        let text = identity.configured().map_or("", |id| id.as_str());
        owned_reply_string(&REPLICA_ID_STRING, text)
    }

    fn set(
        &self,
        _ctx: &redis_module::configuration::ConfigurationContext,
        val: redis_module::RedisString,
    ) -> Result<(), redis_module::RedisError> {
        let id = parse_replica_id(val.as_slice())
            .map_err(|e| redis_module::RedisError::String(e.to_string()))?;
        crate::pncounter::identity().configure(id, crate::ffi::random_bytes());
        Ok(())
    }
}

/// A snapshot of the configs a command needs, read once per command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub promote_threshold: i64,
    pub max_shards: usize,
    pub token_window_ms: i64,
    pub token_max_future_ms: i64,
    pub bucket_ms: i64,
    pub bucket_retention_ms: i64,
    pub settle_ms: i64,
    pub track_history: bool,
}

impl Settings {
    pub fn current() -> Settings {
        Settings {
            promote_threshold: PROMOTE_THRESHOLD.load(Relaxed),
            max_shards: usize::try_from(MAX_SHARDS.load(Relaxed))
                .unwrap_or(1)
                .max(1),
            token_window_ms: TOKEN_WINDOW_MS.load(Relaxed),
            token_max_future_ms: TOKEN_MAX_FUTURE_MS.load(Relaxed),
            bucket_ms: BUCKET_MS.load(Relaxed),
            bucket_retention_ms: BUCKET_RETENTION_MS.load(Relaxed),
            settle_ms: SETTLE_MS.load(Relaxed),
            track_history: TRACK_HISTORY.load(Relaxed),
        }
    }
}

impl Default for Settings {
    /// The documented defaults (what a fresh server uses).
    fn default() -> Settings {
        let get = |name: &str| I64_CONFIGS.iter().find(|c| c.0 == name).map_or(0, |c| c.2);
        Settings {
            promote_threshold: get("promote-threshold"),
            max_shards: get("max-shards") as usize,
            token_window_ms: get("token-window-ms"),
            token_max_future_ms: get("token-max-future-ms"),
            bucket_ms: get("bucket-ms"),
            bucket_retention_ms: get("bucket-retention-ms"),
            settle_ms: get("settle-ms"),
            track_history: false,
        }
    }
}

/// Registers every config (module load arguments `name value` set their defaults; a config
/// file line `ctr.name value` overrides those), then applies them.
#[cfg(feature = "module")]
pub fn register(
    ctx: &redis_module::Context,
    args: &[redis_module::RedisString],
) -> Result<(), String> {
    use redis_module::configuration::{
        get_i64_default_config_value, get_string_default_config_value, register_bool_configuration,
        register_i64_configuration, register_string_configuration, ConfigurationFlags,
    };
    for (name, holder, default, min, max) in I64_CONFIGS {
        let value = get_i64_default_config_value(args, name, default)
            .map_err(|e| format!("load argument {name}: {e}"))?;
        if !(min..=max).contains(&value) {
            return Err(format!(
                "load argument {name} must be between {min} and {max}"
            ));
        }
        register_i64_configuration(
            ctx,
            name,
            holder,
            value,
            min,
            max,
            ConfigurationFlags::DEFAULT,
            None,
        );
    }
    let expose = get_string_default_config_value(args, EXPOSE_INTERNAL_CONFIG, "no")
        .map_err(|e| format!("load argument {EXPOSE_INTERNAL_CONFIG}: {e}"))?;
    let expose = parse_yes_no(expose)
        .ok_or_else(|| format!("load argument {EXPOSE_INTERNAL_CONFIG} must be yes or no"))?;
    register_bool_configuration(
        ctx,
        EXPOSE_INTERNAL_CONFIG,
        &EXPOSE_INTERNAL,
        expose,
        ConfigurationFlags::IMMUTABLE,
        None,
    );
    let hold = get_string_default_config_value(args, DEBUG_HOLD_CREDITS_CONFIG, "no")
        .map_err(|e| format!("load argument {DEBUG_HOLD_CREDITS_CONFIG}: {e}"))?;
    let hold = parse_yes_no(hold)
        .ok_or_else(|| format!("load argument {DEBUG_HOLD_CREDITS_CONFIG} must be yes or no"))?;
    register_bool_configuration(
        ctx,
        DEBUG_HOLD_CREDITS_CONFIG,
        &DEBUG_HOLD_CREDITS,
        hold,
        ConfigurationFlags::IMMUTABLE,
        None,
    );
    // `ctr.debug-panic-in` (load argument only, for tests; not a server config): the named
    // callbacks panic on their next run, to show their panic guards hold (`crate::guard`).
    let panic_in =
        get_string_default_config_value(args, crate::guard::DEBUG_PANIC_IN_CONFIG, "")
            .map_err(|e| format!("load argument {}: {e}", crate::guard::DEBUG_PANIC_IN_CONFIG))?;
    let panic_in = crate::guard::parse_panic_in(panic_in)
        .map_err(|e| format!("load argument {}: {e}", crate::guard::DEBUG_PANIC_IN_CONFIG))?;
    if panic_in != 0 {
        ctx.log_warning(&format!(
            "ctr: {} is set: callbacks will panic on purpose (a test setting; never in production)",
            crate::guard::DEBUG_PANIC_IN_CONFIG
        ));
    }
    crate::guard::set_panic_in(panic_in);
    let track = get_string_default_config_value(args, TRACK_HISTORY_CONFIG, "no")
        .map_err(|e| format!("load argument {TRACK_HISTORY_CONFIG}: {e}"))?;
    let track = parse_yes_no(track)
        .ok_or_else(|| format!("load argument {TRACK_HISTORY_CONFIG} must be yes or no"))?;
    register_bool_configuration(
        ctx,
        TRACK_HISTORY_CONFIG,
        &TRACK_HISTORY,
        track,
        ConfigurationFlags::DEFAULT,
        None,
    );
    let replica_id = get_string_default_config_value(args, REPLICA_ID_CONFIG, "")
        .map_err(|e| format!("load argument {REPLICA_ID_CONFIG}: {e}"))?;
    parse_replica_id(replica_id.as_bytes())
        .map_err(|e| format!("load argument {REPLICA_ID_CONFIG}: {e}"))?;
    register_string_configuration(
        ctx,
        REPLICA_ID_CONFIG,
        &REPLICA_ID,
        replica_id,
        ConfigurationFlags::DEFAULT,
        None,
    );
    let links = get_string_default_config_value(args, READ_LINKS_CONFIG, "yes")
        .map_err(|e| format!("load argument {READ_LINKS_CONFIG}: {e}"))?;
    let links = parse_yes_no(links)
        .ok_or_else(|| format!("load argument {READ_LINKS_CONFIG} must be yes or no"))?;
    register_bool_configuration(
        ctx,
        READ_LINKS_CONFIG,
        &READ_LINKS,
        links,
        ConfigurationFlags::DEFAULT,
        None,
    );
    for (name, holder, flags) in [
        (
            READ_LINK_USER_CONFIG,
            &READ_LINK_USER,
            ConfigurationFlags::DEFAULT,
        ),
        (
            READ_LINK_PASSWORD_CONFIG,
            &READ_LINK_PASSWORD,
            ConfigurationFlags::SENSITIVE,
        ),
        (
            METRICS_KEYS_CONFIG,
            &METRICS_KEYS,
            ConfigurationFlags::DEFAULT,
        ),
    ] {
        let value = get_string_default_config_value(args, name, "")
            .map_err(|e| format!("load argument {name}: {e}"))?;
        register_string_configuration(ctx, name, holder, value, flags, None);
    }
    // SAFETY: called from OnLoad with its live context.
    match unsafe { redis_module::raw::RedisModule_LoadConfigs } {
        Some(load) if unsafe { load(ctx.ctx) } == redis_module::raw::REDISMODULE_OK as i32 => {
            // From now on a change of ctr.replica-id is an operator's change.
            crate::pncounter::identity().finish_startup();
            Ok(())
        }
        _ => Err("could not apply the ctr.* configs".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_lie_inside_their_ranges_and_match_the_statics() {
        for (name, holder, default, min, max) in I64_CONFIGS {
            assert!(min <= default && default <= max, "{name}");
            assert_eq!(holder.load(Relaxed), default, "{name}");
        }
        assert_eq!(Settings::default(), Settings::current());
    }

    #[test]
    fn track_history_takes_yes_or_no() {
        assert_eq!(parse_yes_no("yes"), Some(true));
        assert_eq!(parse_yes_no("NO"), Some(false));
        assert_eq!(parse_yes_no("true"), None);
        assert_eq!(parse_yes_no(""), None);
        assert!(!Settings::default().track_history);
    }

    #[test]
    fn replica_id_values_are_validated() {
        assert_eq!(parse_replica_id(b""), Ok(None));
        assert_eq!(
            parse_replica_id(b"us-east_1").unwrap().unwrap().as_str(),
            "us-east_1"
        );
        for bad in [&b"a.b"[..], b"a b", b"a\0", &[b'x'; 49], b"\xff", b"%s"] {
            assert!(parse_replica_id(bad).is_err(), "{bad:?}");
        }
    }
}
