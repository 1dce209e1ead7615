//! A counter renamed onto a holder's name is not that holder. A holder exists because the
//! spread protocol made it (its first write passed the holder check, or a budget credit made
//! it); a client's `RENAME` of any counter onto a name shaped like a holder's
//! (`{ctr.<id>.<i>.<k>}<home>`) would otherwise be counted in that spread's total as if it were
//! one: a negative counter renamed onto a floored spread's holder took the total below its
//! floor. (`COPY` there is refused by the type's copy callback; `RESTORE` writes a state under
//! a name its user may write, the `MIGRATE` of a real holder included: see CLUSTER.md, "Who may
//! do what".)
//!
//! So at the `rename_to` event the arrived counter is marked a **stray** (`Counter::set_stray`),
//! on every node that runs the `RENAME` (see [`mark`]): `ctr_store` then lets no command
//! read or write it (each says why: rename it away or delete it), no transfer, collection or
//! audit takes it, and a gather counts it 0, as a holder that is missing. Renamed (or restored)
//! under a name that is not a holder's, it is unmarked: a counter of its own units again, a
//! home with its holders when it was one.

use super::ctr_store::{is_stray, update_counter_even_stray};
use super::spread_transfer::is_master;
use crate::counter::spread::parse_holder_name;
use crate::counter::{CounterCell, CounterRef};
use crate::ffi::{string_bytes, Ctx, Key, KeyContent, RawString};
use crate::metrics;
use crate::persist::ctr_type::ctr_type;

/// After the `rename_to` event of `key`: marks a counter renamed onto a holder's name a stray,
/// and unmarks one renamed onto any other name.
pub fn on_renamed(ctx: Ctx, key: RawString) {
    let name = string_bytes(key);
    mark(ctx, key, parse_holder_name(name).is_some());
}

/// After the `restore` event of `key`: a stray's dump restored under a name that is not a
/// holder's is a counter of its own (under a holder's name, `RESTORE` keeps what it writes).
pub fn on_restored(ctx: Ctx, key: RawString) {
    if parse_holder_name(string_bytes(key)).is_none() {
        mark(ctx, key, false);
    }
}

/// Marks (or unmarks) the counter at `key` as a stray; nothing when it already is so, or the
/// key holds no counter. A function of the `RENAME` (or `RESTORE`) alone, so every node that
/// runs it decides the same, in place: the master, its replicas as they replay the stream, a
/// server loading its AOF. Not replicated as a state: a write made in a keyspace event reaches
/// the stream before the command that fired it (Redis 7.0), and the `RENAME` after it would
/// put the unmarked counter back on the replica.
fn mark(ctx: Ctx, key: RawString, stray: bool) {
    let opened = Key::open(ctx, key, true);
    let KeyContent::Mine(raw) = opened.content(ctr_type()) else {
        return;
    };
    // SAFETY: the key is open and holds a live counter for the duration of this borrow.
    let c = unsafe { CounterCell::borrow(raw) };
    if is_stray(c) == stray || (stray && carries_units_in_flight(c)) {
        return;
    }
    let marked = update_counter_even_stray(&opened, |c, _| {
        c.set_stray(stray);
        Ok(())
    });
    drop(opened);
    if marked.is_err() || !is_master(ctx) {
        return;
    }
    let name = String::from_utf8_lossy(string_bytes(key));
    if stray {
        metrics::STRAYS_MARKED.incr();
        ctx.log_warning(&format!(
            "ctr: '{name}' was renamed onto a spread counter holder's name: it is not that holder (counted in no total, written by no command) until it is renamed to another name"
        ));
    } else {
        metrics::STRAYS_UNMARKED.incr();
    }
}

/// True for a counter whose units are still on their way by the spread protocol (a sealed
/// holder folding back, a budget move unacknowledged): made a stray, those units would be
/// counted nowhere until it is renamed back. It is taken for what it carries, as before: a
/// renamed sealed holder's fold still reaches its home (`transfer`'s carrier rule).
fn carries_units_in_flight(c: CounterRef) -> bool {
    match c {
        CounterRef::Boxed(b) => b.is_sealed() || b.transfers().is_some_and(|t| t.has_pending()),
        CounterRef::Inline(_) | CounterRef::Limiter(_) => false,
    }
}
