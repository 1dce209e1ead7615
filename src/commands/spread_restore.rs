//! `RESTORE` of a spread home under another name while the home lives makes a copy, not a
//! second home: a second home of the same holders would read their units into its own total
//! (counted twice) and could take a fold's credit meant for the real one. So when a counter
//! arrives by `RESTORE` and [`Copy::is_copy`] says it is a copy (its holders carry another
//! home name, which holds a home of the same spread on this master, or, in a cluster, lies in
//! another slot, where only a copy can be), it is detached into an independent counter of its
//! own units (`Counter::detach_from_spread`), replicated as its resulting state. A restore
//! under the home's own name (`RESTORE ... REPLACE`, `MIGRATE`), or after the home is gone,
//! keeps the holders. Counted in `ctr_restored_copies_detached`.

use super::ctr_store::{publish_state, update_counter, with_counter};
use super::spread_cluster::in_cluster;
use super::spread_transfer::is_master;
use crate::counter::collect::Copy;
use crate::counter::spread::{carried_home, parse_holder_name};
use crate::counter::CounterRef;
use crate::ffi::{string_bytes, Ctx, Key, KeyName, RawString};
use crate::metrics;
use crate::persist::ctr_format;

/// After the `restore` event of `key`: detaches it when it is a copy of a living home.
pub fn on_restored(ctx: Ctx, key: RawString) {
    if !is_master(ctx) {
        return; // the master's detach reaches replicas and the AOF as a state
    }
    let name = string_bytes(key);
    let Ok(Some((carried, spread_id))) = with_counter(ctx, key, |c| match c {
        Some(CounterRef::Boxed(b)) => {
            let current = b.spread().map(|s| s.holders.as_slice()).unwrap_or(&[]);
            let leaving = b.leaving().iter().map(|l| l.name.as_slice());
            let holders: Vec<&[u8]> = current.iter().map(Vec::as_slice).chain(leaving).collect();
            let carried = carried_home(holders.iter().copied())?.to_vec();
            let id = holders.iter().find_map(|h| parse_holder_name(h))?.spread_id;
            Some((carried, id))
        }
        _ => None,
    }) else {
        return;
    };
    let carried_key = KeyName::new(ctx, &carried);
    let is_copy = with_counter(ctx, carried_key.raw, |c| {
        let under = match c {
            Some(CounterRef::Boxed(b)) => Some(b),
            _ => None,
        };
        Copy {
            name,
            carried_home: &carried,
            spread_id,
            under_the_carried_home: under,
            in_cluster: in_cluster(ctx),
        }
        .is_copy()
    });
    if spread_id == 0 || is_copy != Ok(true) {
        return;
    }
    let opened = Key::open(ctx, key, true);
    let state = update_counter(&opened, |c, _| {
        c.detach_from_spread();
        Ok(ctr_format::encode(c))
    });
    drop(opened);
    if let Ok(state) = state {
        if publish_state(ctx, key, &state).is_ok() {
            metrics::RESTORED_COPIES_DETACHED.incr();
            ctx.log_warning(&format!(
                "ctr: '{}' was restored as a copy of the spread counter '{}': it is now a counter of its own units",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(&carried)
            ));
        }
    }
}
