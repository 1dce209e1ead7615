//! Reply normalisation: RESP3 maps and RESP2 flat arrays alike.

use std::collections::HashMap;

use redis::{FromRedisValue, Value};

use crate::error::CtrError;
use crate::types::{CounterInfo, Increxed, PncInfo, PncReplica, Reconciled, Throttled};

type Result<T> = std::result::Result<T, CtrError>;

fn unexpected(what: &str, value: &Value) -> CtrError {
    CtrError::Reply(format!("{what}: {value:?}"))
}

/// A value of a plain type (an integer, an optional integer, bytes...).
pub(crate) fn plain<T: FromRedisValue>(value: Value) -> Result<T> {
    redis::from_owned_redis_value(value).map_err(CtrError::from)
}

pub(crate) fn ok(value: Value) -> Result<()> {
    match value {
        Value::Okay => Ok(()),
        Value::SimpleString(s) if s == "OK" => Ok(()),
        other => Err(unexpected("expected OK", &other)),
    }
}

/// Field name -> value of a RESP3 map or a RESP2 `[field, value, ...]` array.
fn fields(value: Value) -> Result<HashMap<String, Value>> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut items = items.into_iter();
            std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
        }
        other => return Err(unexpected("expected a map", &other)),
    };
    pairs
        .into_iter()
        .map(|(name, v)| Ok((plain::<String>(name)?, v)))
        .collect()
}

fn take<T: FromRedisValue>(map: &mut HashMap<String, Value>, name: &str) -> Result<T> {
    plain(map.remove(name).unwrap_or(Value::Nil))
}

pub(crate) fn reconciled(value: Value) -> Result<Reconciled> {
    let (value, drift): (i64, i64) = plain(value)?;
    Ok(Reconciled { value, drift })
}

pub(crate) fn increxed(value: Value) -> Result<Increxed> {
    let (value, applied): (i64, i64) = plain(value)?;
    Ok(Increxed { value, applied })
}

pub(crate) fn throttled(value: Value) -> Result<Throttled> {
    let (limited, limit, remaining, retry_after, reset_after): (i64, i64, i64, i64, i64) =
        plain(value)?;
    Ok(Throttled {
        limited: limited != 0,
        limit,
        remaining,
        retry_after,
        reset_after,
    })
}

pub(crate) fn counter_info(value: Value) -> Result<Option<CounterInfo>> {
    if value == Value::Nil {
        return Ok(None);
    }
    let mut map = fields(value)?;
    let mut info = CounterInfo {
        value: take(&mut map, "value")?,
        floor: take(&mut map, "floor")?,
        shards: take(&mut map, "shards")?,
        shard_values: take(&mut map, "shard_values")?,
        budgets: take(&mut map, "budgets")?,
        ceiling: take(&mut map, "ceiling")?,
        ceiling_budgets: take(&mut map, "ceiling_budgets")?,
        add_rate: take(&mut map, "add_rate")?,
        tokens: take(&mut map, "tokens")?,
        ledger: take(&mut map, "ledger")?,
        duplicates_ignored: take(&mut map, "duplicates_ignored")?,
        bucket_count: take(&mut map, "bucket_count")?,
        last_watermark: take(&mut map, "last_watermark")?,
        last_drift: take(&mut map, "last_drift")?,
        total_abs_drift: take(&mut map, "total_abs_drift")?,
        reconciles: take(&mut map, "reconciles")?,
        window_ms: take(&mut map, "window_ms")?,
        window_buckets: take(&mut map, "window_buckets")?,
        encoding: take(&mut map, "encoding")?,
        holders: take(&mut map, "holders")?,
        holder_values: take(&mut map, "holder_values")?,
        holder_ages_ms: take(&mut map, "holder_ages_ms")?,
        headroom: take(&mut map, "headroom")?,
        holder_floors: take(&mut map, "holder_floors")?,
        holder_budgets: take(&mut map, "holder_budgets")?,
        units_in_flight: take(&mut map, "units_in_flight")?,
        holder_refused_units: take(&mut map, "holder_refused_units")?,
        other: HashMap::new(),
    };
    info.other = map;
    Ok(Some(info))
}

pub(crate) fn pnc_info(value: Value) -> Result<PncInfo> {
    let mut map = fields(value)?;
    let replicas: Vec<Value> = take(&mut map, "replicas")?;
    Ok(PncInfo {
        value: take(&mut map, "value")?,
        replica_id: take(&mut map, "replica-id")?,
        home: take(&mut map, "home")?,
        replicas: replicas
            .into_iter()
            .map(|entry| {
                let mut entry = fields(entry)?;
                Ok(PncReplica {
                    id: take(&mut entry, "id")?,
                    p: take(&mut entry, "p")?,
                    n: take(&mut entry, "n")?,
                })
            })
            .collect::<Result<_>>()?,
    })
}

/// A parser's error as the `redis` crate's, for `FromRedisValue` (a pipeline's replies).
fn as_redis_error(e: CtrError) -> redis::RedisError {
    match e {
        CtrError::Redis(e) => e,
        other => redis::RedisError::from((
            redis::ErrorKind::TypeError,
            "unexpected reply",
            other.to_string(),
        )),
    }
}

/// `CTR.INFO` of an existing key, as a pipeline reply (`Option<CounterInfo>` for a key that
/// may be missing).
impl FromRedisValue for CounterInfo {
    fn from_redis_value(v: &Value) -> redis::RedisResult<CounterInfo> {
        counter_info(v.clone())
            .map_err(as_redis_error)?
            .ok_or_else(|| as_redis_error(unexpected("CTR.INFO of a missing key", v)))
    }
}

impl FromRedisValue for PncInfo {
    fn from_redis_value(v: &Value) -> redis::RedisResult<PncInfo> {
        pnc_info(v.clone()).map_err(as_redis_error)
    }
}

impl FromRedisValue for Increxed {
    fn from_redis_value(v: &Value) -> redis::RedisResult<Increxed> {
        increxed(v.clone()).map_err(as_redis_error)
    }
}

impl FromRedisValue for Throttled {
    fn from_redis_value(v: &Value) -> redis::RedisResult<Throttled> {
        throttled(v.clone()).map_err(as_redis_error)
    }
}

impl FromRedisValue for Reconciled {
    fn from_redis_value(v: &Value) -> redis::RedisResult<Reconciled> {
        reconciled(v.clone()).map_err(as_redis_error)
    }
}
