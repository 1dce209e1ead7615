//! Units `PNC.DECRFLOOR` refused on this server, per key, since it started: the demand
//! `pnc-sync` moves rights toward (issue 36). A statistic, not data: it is not saved or
//! replicated, and it is forgotten as a whole past [`REFUSED_KEYS`] keys.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

static REFUSED_UNITS: Mutex<Option<HashMap<Vec<u8>, u64>>> = Mutex::new(None);
const REFUSED_KEYS: usize = 100_000;

fn refused_units() -> MutexGuard<'static, Option<HashMap<Vec<u8>, u64>>> {
    REFUSED_UNITS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Notes `amount` units refused on `key`.
pub fn note(key: &[u8], amount: i64) {
    let mut map = refused_units();
    let map = map.get_or_insert_with(HashMap::new);
    if map.len() >= REFUSED_KEYS && !map.contains_key(key) {
        map.clear();
    }
    let units = map.entry(key.to_vec()).or_insert(0);
    *units = units.saturating_add(amount.unsigned_abs());
}

/// The units refused on `key` so far.
pub fn units(key: &[u8]) -> u64 {
    refused_units()
        .as_ref()
        .and_then(|m| m.get(key).copied())
        .unwrap_or(0)
}
