//! The one decision only a master makes from outside the counter's state: when a cold (inline)
//! counter turns hot. It lives on the main thread and is replicated as its effect.

use std::cell::RefCell;

use ahash::RandomState;

use crate::counter::HotKeys;

/// Slots of the shared hot-key table (24 bytes each).
const HOT_KEY_SLOTS: usize = 4096;

struct Decider {
    hot_keys: HotKeys,
    hasher: RandomState,
}

thread_local! {
    static DECIDER: RefCell<Decider> = RefCell::new(Decider {
        hot_keys: HotKeys::new(HOT_KEY_SLOTS),
        // Fixed seeds: the table is local and advisory, no need to randomise.
        hasher: RandomState::with_seeds(1, 2, 3, 4),
    });
}

/// Records an add to an inline counter; true when it should be promoted.
pub fn inline_counter_is_hot(key: &[u8], now: i64, threshold: i64) -> bool {
    DECIDER.with(|d| {
        let mut d = d.borrow_mut();
        let hash = d.hasher.hash_one(key);
        d.hot_keys.record(hash, now, threshold)
    })
}

/// The last-second add rate of an inline counter, as the hot-key table saw it.
pub fn inline_counter_rate(key: &[u8]) -> u32 {
    DECIDER.with(|d| {
        let d = d.borrow();
        d.hot_keys.rate(d.hasher.hash_one(key))
    })
}
