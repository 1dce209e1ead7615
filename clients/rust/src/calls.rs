//! Each command once: its arguments and the parser of its reply. The sync and async traits
//! only send a [`Call`] and parse what comes back, so both behave the same.

use redis::{Cmd, ToRedisArgs, Value};

use crate::error::CtrError;
use crate::reply;
use crate::types::{
    AddOptions, CounterInfo, IncrexOptions, Increxed, PncInfo, Reconciled, Source, Throttled,
};

pub(crate) struct Call<T> {
    pub(crate) cmd: Cmd,
    pub(crate) parse: fn(Value) -> Result<T, CtrError>,
    /// A command that changes the counter: sent once on a sync cluster connection, which
    /// would resend it after a timeout (see [`crate::spread::send_once`]).
    pub(crate) write: bool,
    /// A write that may be sent again after a connection broke once it was sent (it may have
    /// run): it carries a token (a copy replays the first reply) or sets what it sets (a floor,
    /// a ceiling, a reconciled value, a merged state). An untokened add sent twice counts twice.
    /// Read by the cluster connection's sender alone.
    #[cfg_attr(not(feature = "cluster"), allow(dead_code))]
    pub(crate) resendable: bool,
}

fn call<T>(cmd: Cmd, parse: fn(Value) -> Result<T, CtrError>) -> Call<T> {
    Call {
        cmd,
        parse,
        write: false,
        resendable: true,
    }
}

fn write<T>(cmd: Cmd, parse: fn(Value) -> Result<T, CtrError>) -> Call<T> {
    Call {
        cmd,
        parse,
        write: true,
        resendable: false,
    }
}

/// A write that sets what it sets, or one with a token: see [`Call::resendable`].
fn resendable_write<T>(cmd: Cmd, parse: fn(Value) -> Result<T, CtrError>) -> Call<T> {
    Call {
        resendable: true,
        ..write(cmd, parse)
    }
}

/// A write, resendable when it carries a token.
fn write_tokened<T>(
    cmd: Cmd,
    parse: fn(Value) -> Result<T, CtrError>,
    token: Option<&[u8]>,
) -> Call<T> {
    Call {
        resendable: token.is_some(),
        ..write(cmd, parse)
    }
}

fn keyed<K: ToRedisArgs>(name: &str, key: K) -> Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(key);
    cmd
}

fn with_token_and_time(cmd: &mut Cmd, token: Option<&[u8]>, at: Option<i64>) {
    if let Some(token) = token {
        cmd.arg("TOKEN").arg(token);
    }
    if let Some(at) = at {
        cmd.arg("AT").arg(at);
    }
}

/// The expiry options of `CTR.ADD` and `CTR.INCREX`: `EX`/`PX`/`EXAT`/`PXAT` with its time,
/// `PERSIST`, `ENX`, as given (a combination the module refuses is refused there).
fn with_expiry(cmd: &mut Cmd, time: Option<(&str, i64)>, persist: bool, enx: bool) {
    if let Some((name, time)) = time {
        cmd.arg(name).arg(time);
    }
    if persist {
        cmd.arg("PERSIST");
    }
    if enx {
        cmd.arg("ENX");
    }
}

pub(crate) fn add<K: ToRedisArgs>(key: K, delta: i64) -> Call<Option<i64>> {
    add_with(key, delta, &AddOptions::default())
}

pub(crate) fn add_with<K: ToRedisArgs>(
    key: K,
    delta: i64,
    options: &AddOptions,
) -> Call<Option<i64>> {
    let mut cmd = keyed("CTR.ADD", key);
    cmd.arg(delta);
    with_token_and_time(&mut cmd, options.token.as_deref(), options.at);
    with_expiry(&mut cmd, options.expiry, options.persist, options.enx);
    write_tokened(cmd, reply::plain, options.token.as_deref())
}

pub(crate) fn get<K: ToRedisArgs>(key: K) -> Call<i64> {
    call(keyed("CTR.GET", key), reply::plain)
}

pub(crate) fn mget<K: ToRedisArgs>(keys: &[K]) -> Call<Vec<i64>> {
    call(keyed("CTR.MGET", keys), reply::plain)
}

pub(crate) fn clear<K: ToRedisArgs>(key: K) -> Call<i64> {
    write(keyed("CTR.CLEAR", key), reply::plain)
}

pub(crate) fn clear_with_token<K: ToRedisArgs, T: AsRef<[u8]>>(key: K, token: T) -> Call<i64> {
    let mut cmd = keyed("CTR.CLEAR", key);
    with_token_and_time(&mut cmd, Some(token.as_ref()), None);
    resendable_write(cmd, reply::plain)
}

pub(crate) fn floor<K: ToRedisArgs>(key: K, floor: Option<i64>) -> Call<()> {
    let mut cmd = keyed("CTR.FLOOR", key);
    match floor {
        Some(floor) => cmd.arg(floor),
        None => cmd.arg("NONE"),
    };
    resendable_write(cmd, reply::ok)
}

pub(crate) fn ceil<K: ToRedisArgs>(key: K, ceiling: Option<i64>) -> Call<()> {
    let mut cmd = keyed("CTR.CEIL", key);
    match ceiling {
        Some(ceiling) => cmd.arg(ceiling),
        None => cmd.arg("NONE"),
    };
    resendable_write(cmd, reply::ok)
}

pub(crate) fn increx<K: ToRedisArgs>(key: K, options: &IncrexOptions) -> Call<Increxed> {
    let mut cmd = keyed("CTR.INCREX", key);
    cmd.arg("BYINT").arg(options.by);
    for (name, bound) in [("LBOUND", options.lbound), ("UBOUND", options.ubound)] {
        if let Some(bound) = bound {
            cmd.arg(name).arg(bound);
        }
    }
    if options.saturate {
        cmd.arg("SATURATE");
    }
    with_expiry(&mut cmd, options.expiry, options.persist, options.enx);
    with_token_and_time(&mut cmd, options.token.as_deref(), options.at);
    write_tokened(cmd, reply::increxed, options.token.as_deref())
}

pub(crate) fn refund<K: ToRedisArgs, T: AsRef<[u8]>>(key: K, token: T) -> Call<Option<i64>> {
    let mut cmd = keyed("CTR.REFUND", key);
    cmd.arg("TOKEN").arg(token.as_ref());
    resendable_write(cmd, reply::plain)
}

pub(crate) fn decrfloor<K: ToRedisArgs>(key: K, amount: i64) -> Call<Option<i64>> {
    write(
        keyed("CTR.DECRFLOOR", key).arg(amount).clone(),
        reply::plain,
    )
}

pub(crate) fn decrfloor_with<K: ToRedisArgs, T: AsRef<[u8]>>(
    key: K,
    amount: i64,
    token: T,
    at: Option<i64>,
) -> Call<Option<i64>> {
    let mut cmd = keyed("CTR.DECRFLOOR", key);
    cmd.arg(amount);
    with_token_and_time(&mut cmd, Some(token.as_ref()), at);
    resendable_write(cmd, reply::plain)
}

pub(crate) fn reconcile<K: ToRedisArgs>(key: K, truth: i64, at: Option<i64>) -> Call<Reconciled> {
    let mut cmd = keyed("CTR.RECONCILE", key);
    cmd.arg(truth);
    with_token_and_time(&mut cmd, None, at);
    resendable_write(cmd, reply::reconciled)
}

pub(crate) fn reconcile_from<K: ToRedisArgs, S: ToRedisArgs>(
    key: K,
    kind: Source,
    source: S,
    at: Option<i64>,
) -> Call<Reconciled> {
    let mut cmd = keyed("CTR.RECONCILE", key);
    cmd.arg("FROM").arg(kind.keyword()).arg(source);
    with_token_and_time(&mut cmd, None, at);
    resendable_write(cmd, reply::reconciled)
}

/// `max_burst count period`, as `CTR.THROTTLE` takes them.
pub type Rate = (i64, i64, i64);

pub(crate) fn throttle<K: ToRedisArgs>(key: K, rate: Rate, quantity: i64) -> Call<Throttled> {
    let mut cmd = keyed("CTR.THROTTLE", key);
    cmd.arg(rate.0).arg(rate.1).arg(rate.2).arg(quantity);
    write(cmd, reply::throttled)
}

pub(crate) fn throttle_with<K: ToRedisArgs, T: AsRef<[u8]>>(
    key: K,
    rate: Rate,
    quantity: i64,
    token: T,
    at: Option<i64>,
) -> Call<Throttled> {
    let mut cmd = keyed("CTR.THROTTLE", key);
    cmd.arg(rate.0).arg(rate.1).arg(rate.2).arg(quantity);
    with_token_and_time(&mut cmd, Some(token.as_ref()), at);
    resendable_write(cmd, reply::throttled)
}

pub(crate) fn window<K: ToRedisArgs>(
    key: K,
    window_ms: Option<i64>,
    buckets: Option<i64>,
) -> Call<()> {
    let mut cmd = keyed("CTR.WINDOW", key);
    match window_ms {
        None => cmd.arg("NONE"),
        Some(ms) => cmd.arg(ms),
    };
    if let (Some(_), Some(n)) = (window_ms, buckets) {
        cmd.arg("BUCKETS").arg(n);
    }
    resendable_write(cmd, reply::ok)
}

pub(crate) fn reconcile_start<K: ToRedisArgs>(key: K) -> Call<i64> {
    write(
        keyed("CTR.RECONCILE", key).arg("START").clone(),
        reply::plain,
    )
}

pub(crate) fn spread<K: ToRedisArgs>(key: K, holders: u32) -> Call<Vec<String>> {
    resendable_write(keyed("CTR.SPREAD", key).arg(holders).clone(), reply::plain)
}

pub(crate) fn holders<K: ToRedisArgs>(key: K) -> Call<Vec<String>> {
    call(keyed("CTR.HOLDERS", key), reply::plain)
}

pub(crate) fn holders_at<K: ToRedisArgs>(key: K, at: i64) -> Call<Vec<String>> {
    call(
        keyed("CTR.HOLDERS", key).arg("AT").arg(at).clone(),
        reply::plain,
    )
}

pub(crate) fn info<K: ToRedisArgs>(key: K) -> Call<Option<CounterInfo>> {
    call(keyed("CTR.INFO", key), reply::counter_info)
}

pub(crate) fn pnc_add<K: ToRedisArgs>(key: K, delta: i64) -> Call<i64> {
    write(keyed("PNC.ADD", key).arg(delta).clone(), reply::plain)
}

pub(crate) fn pnc_get<K: ToRedisArgs>(key: K) -> Call<i64> {
    call(keyed("PNC.GET", key), reply::plain)
}

pub(crate) fn pnc_state<K: ToRedisArgs>(key: K) -> Call<Option<Vec<u8>>> {
    call(keyed("PNC.STATE", key), reply::plain)
}

pub(crate) fn pnc_merge<K: ToRedisArgs>(key: K, state: &[u8]) -> Call<i64> {
    resendable_write(keyed("PNC.MERGE", key).arg(state).clone(), reply::plain)
}

pub(crate) fn pnc_clear<K: ToRedisArgs>(key: K) -> Call<i64> {
    write(keyed("PNC.CLEAR", key), reply::plain)
}

pub(crate) fn pnc_info<K: ToRedisArgs>(key: K) -> Call<PncInfo> {
    call(keyed("PNC.INFO", key), reply::pnc_info)
}
