//! Transfers between counters, the pure part: moving [`Units`] (dv value units, df floor units,
//! dc ceiling units) from a *giver* key to a *receiver* key, possibly on another master, with no unit lost or
//! counted twice. The glue (`crate::runtime::spread_transfer`) drives it; folds of spread
//! counters (shrinking) are built on it, and so are budget moves between holders.
//!
//! A transfer is two ordinary replicated writes sharing one id (giver name, seq):
//! 1. [`Counter::start_transfer`] on the giver's master: value -= dv, floor -= df,
//!    ceiling -= dc, and an
//!    [`Outgoing`] entry in the giver's outbox (at most one per receiver, so a receiver sees
//!    one giver's seqs in increasing order).
//! 2. [`Counter::apply_credit`] on the receiver's master: value += dv, floor += df,
//!    ceiling += dc, iff seq is
//!    above the highest seq already applied from that giver (the *inbox*, one entry per giver,
//!    kept for ever: exact, O(givers)); a repeat changes nothing but is acknowledged again.
//! 3. [`Counter::apply_ack`] on the giver's master: the outbox entry goes. Until then the
//!    giver resends the credit.
//!
//! A gather counts value units in flight at the giver ([`Counter::units_in_hand`]) until the
//! ack. That is exact for folds (the home counts a leaving holder only until its credit); a
//! transfer of value units (dv != 0) between two holders of one total would count them twice
//! between credit and ack, so other transfers move floor and ceiling units only (dv = 0).
//!
//! Seqs are `max(last + 1, now_ms * 1024)`: they grow across a giver's lives, so a giver key
//! deleted and made again still sends seqs above what its receivers already applied.
//!
//! Two-sided: a receiver applies a credit only for a transfer it expects ([`Counter::expects`]),
//! so a state forged or duplicated (RESTORE under another name, SETSTATE, RENAME) credits
//! nothing. A giver has an id of its own ([`Transfers::giver_id`], random, made at its first
//! debit) that travels with its state: receivers deduplicate by that id, not by the giver's
//! name, so a copy of a giver restored under another name, or a renamed giver, replays a
//! credit as a repeat. A fold credit names the fold it ends (the *fold id* the home gave the
//! leaving holder); a budget move is expected only between members of one spread and never
//! by a sealed holder. A move the receiver refuses is rolled back at the giver
//! ([`Counter::apply_refusal`]); a refused fold is kept and sent again (the home may have been
//! renamed: its seal request, which carries the same fold id, re-targets the fold).
//!
//! A *fold* moves a whole spread holder back to its home: the home lists the holder in
//! `leaving` ([`Counter::begin_fold`]); the holder's master *seals* it
//! ([`Counter::seal_into`]: a transfer of everything it holds to the home, after which it
//! refuses writes); the home's credit removes it from `leaving` in the same write. A gather
//! counts a leaving holder's [`Counter::units_in_hand`] (its value plus what it has sent and not
//! had acknowledged) only while the home, when it sums, still lists it as leaving: before the
//! credit the units are at the holder (counted there), after it they are in the home's value.

use super::budget_kind::BudgetKind;
use super::folded::{self, FoldedMark};
use super::listing::{ListClock, ListedAtError, Listing};
use super::{exact_sum, Counter, CounterError};
use crate::counter::spread::{
    bounds_by_name, carried_home, parse_holder_name, same_spread, NameBounds, MAX_HOLDERS,
    MAX_HOLDER_NAME,
};

/// Longest key name a transfer may name (a giver or a receiver).
pub const MAX_NAME: usize = MAX_HOLDER_NAME;
/// Most outbox entries, inbox entries, or leaving holders one counter keeps.
pub const MAX_ENTRIES: usize = 1 << 16;
/// Most retired spread ids a home keeps ([`Transfers::retired`]); past it the oldest goes.
pub const MAX_RETIRED: usize = 64;

/// What one transfer moves, as its receiver applies it (its giver applies the opposite): value
/// units, floor units and ceiling units. A budget move of `n` down-budget units from a floored
/// giver is `df = -n` (the giver's floor up by `n`, the receiver's down); of `n` up-budget
/// units from a ceiled giver, `dc = n` (the giver's ceiling down by `n`, the receiver's up).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Units {
    pub dv: i64,
    pub df: i64,
    pub dc: i64,
}

impl Units {
    /// Floor units only (a floored spread's budget move).
    pub fn floor(df: i64) -> Units {
        Units {
            df,
            ..Units::default()
        }
    }

    /// Value and floor units (a fold of a floored holder, a test's move).
    pub fn value_and_floor(dv: i64, df: i64) -> Units {
        Units { dv, df, dc: 0 }
    }

    /// Ceiling units only (a ceiled spread's budget move).
    pub fn ceiling(dc: i64) -> Units {
        Units {
            dc,
            ..Units::default()
        }
    }

    /// What the giver applies: every kind negated. None on overflow.
    fn negated(self) -> Option<Units> {
        Some(Units {
            dv: self.dv.checked_neg()?,
            df: self.df.checked_neg()?,
            dc: self.dc.checked_neg()?,
        })
    }
}

/// A transfer sent and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub receiver: Vec<u8>,
    pub seq: u64,
    pub dv: i64,
    pub df: i64,
    /// Ceiling units (0 but in a ceiled spread).
    pub dc: i64,
    /// The fold this transfer carries out (the home's id for it), 0 for a budget move.
    pub fold_id: u64,
    /// The giver's key name when it debited: what the receiver judges the credit by, the same
    /// in every copy of the credit whatever the giver is called later. Empty in a state from
    /// before this field (the giver's current name stands in).
    pub from: Vec<u8>,
}

/// The fold id of folds begun before fold ids: such a fold is matched by the holder's name.
pub const LEGACY_FOLD: u64 = 1;

/// A holder a home is folding back, and the id of that fold (what its credit must carry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaving {
    pub name: Vec<u8>,
    pub fold_id: u64,
}

/// The last credit applied from one giver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The giver's id; 0 for a giver from before ids (then its name identifies it).
    pub giver_id: u64,
    /// The giver's name when its first credit was applied (a name a new holder must not take).
    pub name: Vec<u8>,
    pub seq: u64,
}

/// The home asks the holder's master to fold `holder` into `home` (the fold `fold_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal {
    pub home: Vec<u8>,
    pub holder: Vec<u8>,
    pub fold_id: u64,
}

/// A giver's credit, sent until it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credit {
    /// The giver's key name when it sent the credit (where the answer goes).
    pub giver: Vec<u8>,
    /// The giver's key name when it debited (what the credit is judged by).
    pub from: Vec<u8>,
    pub receiver: Vec<u8>,
    pub giver_id: u64,
    pub seq: u64,
    pub dv: i64,
    pub df: i64,
    /// Ceiling units (0 but in a ceiled spread).
    pub dc: i64,
    /// The fold this credit ends, 0 for a budget move.
    pub fold_id: u64,
}

impl Outgoing {
    pub fn units(&self) -> Units {
        Units {
            dv: self.dv,
            df: self.df,
            dc: self.dc,
        }
    }
}

impl Credit {
    pub fn units(&self) -> Units {
        Units {
            dv: self.dv,
            df: self.df,
            dc: self.dc,
        }
    }
}

/// A receiver's answer to a credit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub giver: Vec<u8>,
    pub receiver: Vec<u8>,
    pub seq: u64,
    /// The receiver does not expect this transfer: a budget move is rolled back.
    pub refused: bool,
}

/// The giver of a new transfer: its key name now, and a random nonzero id it takes as its
/// giver id when it has none yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Giver<'a> {
    pub name: &'a [u8],
    pub new_id: u64,
}

/// What an answer did to its giver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckEffect {
    /// Not about a transfer the giver has in flight (late, repeated, or a refused fold).
    Nothing,
    /// The outbox entry went; `sealed_and_done` when the giver is a folded holder with nothing
    /// left to send (its key may expire).
    Acknowledged { sealed_and_done: bool },
    /// A refused budget move came back to the giver.
    RolledBack,
}

/// What a receiver did with a credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditOutcome {
    /// Applied now: acknowledge it.
    Applied,
    /// Applied earlier: acknowledge it again.
    Repeat,
    /// Not a transfer this receiver will ever expect: nothing changed; the giver rolls a move
    /// back. Given only for reasons that never change for this credit (so no copy of it can
    /// be applied later), once the receiver's replicas hold the state it was judged on.
    Refused,
    /// Not expected yet (a credit to a home not there: renamed away, or deleted): no answer;
    /// the giver sends it again.
    NotYet,
}

/// What a counter keeps about transfers (the encoded TRANSFER section).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transfers {
    /// This counter's id as a giver (0: it has given nothing since ids exist).
    pub giver_id: u64,
    /// The last seq this counter gave out (0: none yet).
    pub last_seq: u64,
    /// Sent and not acknowledged, by receiver name (strictly increasing, unique).
    pub outbox: Vec<Outgoing>,
    /// The last credit applied per giver, by (giver id, name) strictly increasing; a nonzero
    /// giver id appears once.
    pub inbox: Vec<Applied>,
    /// When this holder was folded: the home it was folded into. It refuses writes.
    pub sealed_into: Option<Vec<u8>>,
    /// Home only: holders being folded back (sealed or about to be), not yet credited.
    pub leaving: Vec<Leaving>,
    /// Home only: the spread ids this home had and no longer has, each of whose folds it
    /// applied (oldest first, at most [`MAX_RETIRED`]). Their givers' inbox entries were
    /// dropped: every credit a holder of such a spread can still send is a repeat
    /// ([`Counter::retire_spread`]).
    pub retired: Vec<u64>,
    /// Home only: holders of its spreads folded back here, by place (one mark per index,
    /// `crate::counter::folded`): their inbox entries were dropped, a credit from a name a
    /// mark covers is a repeat.
    pub folded: Vec<FoldedMark>,
    /// Home only: when each holder was listed and unlisted, for the token window
    /// (`crate::counter::listing`). None: not known (a spread made by an earlier version).
    pub listing: Option<Listing>,
}

/// Which bounds a credit makes on a counter that has none yet, when no unit of that kind
/// moves ([`Counter::apply_credit`]).
#[derive(Debug, Clone, Copy, Default)]
struct MadeBounds {
    floor: bool,
    ceiling: bool,
}

/// A bound after `delta` units of its kind: none stays none unless units move or `make`
/// (then it starts from 0).
fn moved_bound(bound: Option<i64>, delta: i64, make: bool) -> Result<Option<i64>, CounterError> {
    match bound {
        None if delta == 0 && !make => Ok(None),
        None => Ok(Some(delta)),
        Some(b) => b.checked_add(delta).map(Some).ok_or(CounterError::Overflow),
    }
}

/// Why a transfer step was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransferError {
    /// A transfer to this receiver is still unacknowledged (one at a time per pair).
    Busy,
    /// The counter was folded into its home: it takes no more writes.
    Sealed,
    /// The debit or the credit would overflow or cross a floor, or names are bad.
    Counter(CounterError),
}

impl From<CounterError> for TransferError {
    fn from(e: CounterError) -> Self {
        TransferError::Counter(e)
    }
}

impl Transfers {
    pub fn is_empty(&self) -> bool {
        *self == Transfers::default()
    }

    /// Anything still to send: an unacknowledged credit, or a holder to fold.
    pub fn has_pending(&self) -> bool {
        !self.outbox.is_empty() || !self.leaving.is_empty()
    }

    pub fn outgoing_to(&self, receiver: &[u8]) -> Option<&Outgoing> {
        self.outbox
            .binary_search_by(|o| o.receiver.as_slice().cmp(receiver))
            .ok()
            .map(|i| &self.outbox[i])
    }

    /// Where the inbox holds (or would hold) the entry of a giver: by its id, or by its name
    /// for a giver from before ids.
    fn inbox_slot(&self, giver_id: u64, giver: &[u8]) -> Result<usize, usize> {
        self.inbox.binary_search_by(|e| {
            e.giver_id.cmp(&giver_id).then_with(|| {
                if giver_id == 0 {
                    e.name.as_slice().cmp(giver)
                } else {
                    std::cmp::Ordering::Equal
                }
            })
        })
    }

    /// The highest seq applied from the giver `giver_id` (by name when 0): 0 when none.
    pub fn applied_from(&self, giver_id: u64, giver: &[u8]) -> u64 {
        self.inbox_slot(giver_id, giver)
            .map_or(0, |i| self.inbox[i].seq)
    }

    /// True when the credit `seq` of the giver `giver_id`, debited under the name `from`, was
    /// applied here: its inbox entry is at or above it, or `from` is a holder of a spread this
    /// home retired (every credit such a holder can send was applied or answered).
    pub fn has_applied(&self, giver_id: u64, from: &[u8], seq: u64) -> bool {
        self.applied_from(giver_id, from) >= seq
            || self.is_retired_holder(from)
            || folded::covers(&self.folded, from)
    }

    /// True when `name` is a holder of a spread this home retired.
    pub fn is_retired_holder(&self, name: &[u8]) -> bool {
        parse_holder_name(name)
            .is_some_and(|h| h.spread_id != 0 && self.retired.contains(&h.spread_id))
    }

    /// True when `name` was ever folded into (or is folding into) this counter, or gave it
    /// anything, or a mark covers it: a name a new holder must not take (the old key may still
    /// be sealed).
    pub fn knows_name(&self, name: &[u8]) -> bool {
        self.inbox.iter().any(|e| e.name == name)
            || self.leaving.iter().any(|l| l.name == name)
            || self.is_retired_holder(name)
            || folded::covers(&self.folded, name)
    }

    /// The first planner attempt a new holder of the spread `spread_id` may take at each index
    /// (absent: 0): above every name this home knows at that place ([`folded`]).
    pub fn first_attempts(&self, spread_id: u64) -> std::collections::BTreeMap<u64, u64> {
        folded::first_attempts(self, spread_id)
    }

    /// The leaving holder a fold credit ends, if this home still expects it: the fold of that
    /// id, from that holder's name (what the credit was debited under). The id alone is no
    /// proof: the home's `DUMP` shows it, and a key restored under a name its restorer may
    /// write keeps the transfers signed with that name.
    fn leaving_slot(&self, fold_id: u64, giver: &[u8]) -> Option<usize> {
        self.leaving
            .iter()
            .position(|l| l.fold_id == fold_id && l.name == giver)
    }

    /// Checks what a decoder may carry: bounded, ordered, unique names; seqs given out.
    pub fn validate(&self) -> Result<(), CounterError> {
        let bad = |why| Err(CounterError::InvalidOperation(why));
        let name_ok = |n: &[u8]| !n.is_empty() && n.len() <= MAX_NAME;
        folded::validate(self, &[])?;
        if let Some(listing) = &self.listing {
            listing.validate()?;
        }
        if self.outbox.len() > MAX_ENTRIES
            || self.inbox.len() > MAX_ENTRIES
            || self.leaving.len() > MAX_HOLDERS
            || self.retired.len() > MAX_RETIRED
        {
            return bad("too many transfer entries");
        }
        let mut retired = self.retired.clone();
        retired.sort_unstable();
        if retired.windows(2).any(|w| w[0] == w[1]) || retired.first() == Some(&0) {
            return bad("a retired spread id repeated or 0");
        }
        if self.leaving.iter().any(|l| self.is_retired_holder(&l.name)) {
            return bad("a holder of a retired spread still leaving");
        }
        if !self
            .outbox
            .iter()
            .all(|o| name_ok(&o.receiver) && o.from.len() <= MAX_NAME)
            || !self.inbox.iter().all(|e| name_ok(&e.name))
            || !self.leaving.iter().all(|l| name_ok(&l.name))
            || !self.sealed_into.as_deref().is_none_or(name_ok)
        {
            return bad("transfer name length");
        }
        if self
            .outbox
            .windows(2)
            .any(|w| w[0].receiver >= w[1].receiver)
            || self.inbox.windows(2).any(|w| {
                (w[0].giver_id, &w[0].name) >= (w[1].giver_id, &w[1].name)
                    || (w[0].giver_id != 0 && w[0].giver_id == w[1].giver_id)
            })
        {
            return bad("transfer entries repeated or out of order");
        }
        let mut names: Vec<&[u8]> = self.leaving.iter().map(|l| l.name.as_slice()).collect();
        names.sort_unstable();
        let mut folds: Vec<u64> = self.leaving.iter().map(|l| l.fold_id).collect();
        folds.sort_unstable();
        let repeated_fold = folds
            .windows(2)
            .any(|w| w[0] == w[1] && w[0] != LEGACY_FOLD);
        if names.windows(2).any(|w| w[0] == w[1]) || repeated_fold {
            return bad("a holder leaves twice");
        }
        if self.leaving.iter().any(|l| l.fold_id == 0) {
            return bad("a leaving holder without a fold id");
        }
        // Only holders fold back: a forged `leaving` naming another key would have its master
        // seal that key into this one (its units credited here, the key refusing writes).
        if self
            .leaving
            .iter()
            .any(|l| parse_holder_name(&l.name).is_none())
        {
            return bad("a leaving key that is not a holder");
        }
        let folding = self.outbox.iter().filter(|o| o.fold_id != 0).count();
        let fold_to_home = |home: &[u8]| {
            self.outbox
                .iter()
                .all(|o| o.fold_id == 0 || o.receiver == home)
        };
        let folds_ok = match &self.sealed_into {
            Some(home) => folding <= 1 && fold_to_home(home),
            None => folding == 0,
        };
        if !folds_ok {
            return bad("a fold transfer without its seal");
        }
        if self
            .outbox
            .iter()
            .any(|o| o.seq == 0 || o.seq > self.last_seq)
            || self.inbox.iter().any(|e| e.seq == 0)
        {
            return bad("transfer seq out of range");
        }
        Ok(())
    }

    pub fn heap_bytes(&self) -> usize {
        self.outbox
            .iter()
            .map(|o| o.receiver.capacity() + o.from.capacity())
            .chain(self.inbox.iter().map(|e| e.name.capacity()))
            .chain(self.leaving.iter().map(|l| l.name.capacity()))
            .chain(self.sealed_into.iter().map(Vec::capacity))
            .sum::<usize>()
            + self.retired.capacity() * std::mem::size_of::<u64>()
            + self.folded.capacity() * std::mem::size_of::<FoldedMark>()
            + self.outbox.capacity() * std::mem::size_of::<Outgoing>()
            + self.inbox.capacity() * std::mem::size_of::<Applied>()
            + self.leaving.capacity() * std::mem::size_of::<Leaving>()
            + self.listing.as_ref().map_or(0, Listing::heap_bytes)
    }
}

/// A budget move to a home under a name other than `home`.
fn is_to_former_home(o: &Outgoing, home: &[u8]) -> bool {
    o.fold_id == 0 && o.receiver != home && parse_holder_name(&o.receiver).is_none()
}

/// True when an outbox entry signed `from` may be sent by the key `name` it was restored under
/// ([`Counter::drop_foreign_transfers`]): its own name (an empty `from` is the current name's,
/// in states from before the field), or two holder names of one spread (the same id and home).
/// True when a move from the key `giver` to `receiver` goes to the giver's home: a holder
/// moves budget only to its home or to holders, so a receiver that is not a holder name is its
/// home, under whatever name (a RENAME). One such move at a time, whatever the name: the home
/// keeps one high-water seq per giver, and a later move applied under its new name first
/// would make the earlier one, sent to its former name, look applied (a loss: the simulator's
/// seed 720 of its first run with the rebalancer, 13 floor units).
fn moves_to_its_home(giver: &[u8], receiver: &[u8]) -> bool {
    parse_holder_name(giver).is_some() && parse_holder_name(receiver).is_none()
}

fn debited_as(from: &[u8], name: &[u8]) -> bool {
    let both_holders = parse_holder_name(from).is_some() && parse_holder_name(name).is_some();
    from.is_empty() || from == name || (both_holders && same_spread(from, name))
}

/// The seq after `last` at time `now_ms` (see the module docs).
pub fn next_seq(last: u64, now_ms: i64) -> u64 {
    let by_time = u64::try_from(now_ms).unwrap_or(0).saturating_mul(1024);
    last.saturating_add(1).max(by_time)
}

/// The time (ms) a transfer's `seq` carries: when it was debited ([`next_seq`]).
pub fn debited_ms(seq: u64) -> i64 {
    i64::try_from(seq / 1024).unwrap_or(i64::MAX)
}

/// How long a budget move's units hold back the refusals of its giver: a move unanswered
/// longer is stuck (a partition, a receiver gone), and waiting on it would stall every walk
/// that reaches the giver; past it a refusal is final again (the units err low, never sold).
pub const MOVE_IN_FLIGHT_MS: i64 = 30_000;

/// True when a purchase of `amount` on the counter at a key (None: missing) would be refused
/// only for want of budget still travelling ([`Counter::budget_in_flight`] at `now_ms`): the
/// refusal is retryable (`TRYAGAIN`), never recorded against its token. A missing key named as
/// a holder of a floored spread has not had its first credit yet.
pub fn purchase_waits_for_budget(
    counter: Option<&Counter>,
    amount: i64,
    floor_if_none: Option<i64>,
    now_ms: i64,
) -> bool {
    let Some(c) = counter else {
        return floor_if_none.is_some_and(|f| 0i64.checked_sub(amount).is_none_or(|v| v < f));
    };
    purchase_refused(c, amount, floor_if_none) && c.budget_in_flight(floor_if_none, now_ms)
}

/// [`purchase_waits_for_budget`]'s mirror: true when a positive add of `delta` at the counter
/// at a key (None: missing) would be refused only for want of up-budget still travelling
/// ([`Counter::up_budget_in_flight`] at `now_ms`): the refusal is retryable (`TRYAGAIN`), never
/// recorded against its token. A missing key named as a holder of a ceiled spread has not had
/// its first credit yet.
pub fn add_waits_for_up_budget(
    counter: Option<&Counter>,
    delta: i64,
    ceiling_if_none: Option<i64>,
    now_ms: i64,
) -> bool {
    match counter {
        None => refused_by_ceiling(0, delta, ceiling_if_none),
        Some(c) => {
            add_refused_by_ceiling(c, delta, ceiling_if_none)
                && c.up_budget_in_flight(ceiling_if_none, now_ms)
        }
    }
}

/// True when the counter `c` alone cannot take a positive add of `delta` under its ceiling (its
/// own, or the one its name gives it while it has none).
pub fn add_refused_by_ceiling(c: &Counter, delta: i64, ceiling_if_none: Option<i64>) -> bool {
    let ceiling = c.ceiling().map(|x| x.ceiling).or(ceiling_if_none);
    refused_by_ceiling(c.value(), delta, ceiling)
}

/// True when a positive add of `delta` to `value` would pass `ceiling` (or overflow).
fn refused_by_ceiling(value: i64, delta: i64, ceiling: Option<i64>) -> bool {
    NameBounds {
        floor: None,
        ceiling,
    }
    .refuses(value, delta)
}

/// True when the counter `c` alone cannot cover a purchase of `amount` (its own floor, or the
/// floor its name gives it while it has none).
pub fn purchase_refused(c: &Counter, amount: i64, floor_if_none: Option<i64>) -> bool {
    let floor = c.floor().map(|f| f.floor).or(floor_if_none).unwrap_or(0);
    c.value().checked_sub(amount).is_none_or(|v| v < floor)
}

impl Counter {
    /// The transfer state (an empty one when the counter keeps none).
    pub fn transfers(&self) -> Option<&Transfers> {
        self.ext.as_ref()?.transfers.as_deref()
    }

    fn transfers_mut(&mut self) -> &mut Transfers {
        self.ext_mut().transfers.get_or_insert_with(Box::default)
    }

    /// Drops an empty transfer state (and the optional box when nothing else is left).
    fn trim_transfers(&mut self) {
        if let Some(e) = &mut self.ext {
            if e.transfers.as_deref().is_some_and(Transfers::is_empty) {
                e.transfers = None;
            }
        }
        self.trim_ext();
    }

    /// On `RESTORE` under `name`: drops every outbox entry this key did not debit under `name`
    /// and returns how many went. A receiver judges a credit by the name it was debited at
    /// (`from`), and a payload's outbox is the restorer's to write: kept, it would send credits
    /// "from" keys the restorer cannot write (a leaving holder, with the fold id read from its
    /// home's `DUMP`; a floored spread's home). Kept are entries debited under `name` (the
    /// key's own, as `MIGRATE` and `RESTORE ... REPLACE` bring them) and, on a holder name,
    /// those of another holder name of the same spread, id and home (a holder renamed, then
    /// migrated: whoever may write `{ctr.*}<home>` names may write that home's holders already).
    /// A dropped entry's debit stays: a transfer that may have been applied is never undone,
    /// so a genuine one dropped (a renamed home's move, restored) is a leak, never a mint.
    pub fn drop_foreign_transfers(&mut self, name: &[u8]) -> usize {
        if !self.has_foreign_transfers(name) {
            return 0;
        }
        let Some(t) = self.ext.as_mut().and_then(|e| e.transfers.as_deref_mut()) else {
            return 0;
        };
        let before = t.outbox.len();
        t.outbox.retain(|o| debited_as(&o.from, name));
        let dropped = before - t.outbox.len();
        if dropped > 0 {
            self.trim_transfers();
        }
        dropped
    }

    /// True when [`Counter::drop_foreign_transfers`] would drop something (asked on a read).
    pub fn has_foreign_transfers(&self, name: &[u8]) -> bool {
        self.transfers()
            .is_some_and(|t| t.outbox.iter().any(|o| !debited_as(&o.from, name)))
    }

    /// Drops every transfer state (what a copy of the counter under another name starts from).
    pub fn forget_transfers(&mut self) {
        if let Some(e) = &mut self.ext {
            e.transfers = None;
        }
        self.trim_ext();
    }

    /// Makes a copy of a spread home (restored under another name while the home lives) an
    /// independent counter: its own units and floor, no holders, nothing to send or expect,
    /// so it can never take a credit meant for the home it was copied from.
    pub fn detach_from_spread(&mut self) {
        if let Some(e) = &mut self.ext {
            e.spread = None;
            e.transfers = None;
        }
        self.trim_ext();
    }

    /// True when the counter was folded into its home and refuses writes.
    pub fn is_sealed(&self) -> bool {
        self.transfers().is_some_and(|t| t.sealed_into.is_some())
    }

    /// True when the counter is a spread's member: a home listing holders or folding some back,
    /// a key with a transfer unanswered or sealed into a home, or one that took a credit (a
    /// holder). What a home keeps once its spread ended (the ids it retired, its folded marks,
    /// its listing for the token window) does not make it one: shrunk to 1, it is a counter of
    /// its own again.
    pub fn takes_part_in_a_spread(&self) -> bool {
        let moving = self.transfers().is_some_and(|t| {
            !t.outbox.is_empty() || !t.inbox.is_empty() || t.sealed_into.is_some()
        });
        self.spread().is_some() || !self.leaving().is_empty() || moving
    }

    /// True when the counter is sealed and its fold's credit is acknowledged: its units are in
    /// the home (whose replicas hold the credit), and its seal is on its own replicas (the
    /// credit went out only once they held it). A sealed holder sends nothing else, so an
    /// empty outbox is the fold's acknowledgement.
    pub fn fold_landed(&self) -> bool {
        self.transfers()
            .is_some_and(|t| t.sealed_into.is_some() && t.outbox.is_empty())
    }

    /// True when the counter is sealed and its fold has not landed: its seal may not be on its
    /// replicas yet, so it decides nothing a failover could undo. A purchase of a token it does
    /// not remember waits (`TRYAGAIN`) rather than being passed on to the next holder: passed
    /// on, and granted there, the token could be granted here too by a promoted replica that
    /// has the holder unsealed.
    pub fn fold_travels(&self) -> bool {
        self.is_sealed() && !self.fold_landed()
    }

    /// What a gather counts for this counter as a holder: its value plus the value units it
    /// has sent and not had acknowledged. None on overflow.
    pub fn units_in_hand(&self) -> Option<i64> {
        match self.transfers() {
            None => Some(self.value),
            Some(t) => exact_sum(std::iter::once(self.value).chain(t.outbox.iter().map(|o| o.dv))),
        }
    }

    /// True when this counter is the holder `holder` sealed for the fold `fold_id` (its credit
    /// debited under that name) whose credit is not acknowledged yet: it, and no key made anew
    /// under the holder's old name, carries that fold (a sealed holder renamed before its home
    /// had it). The fold id alone is no proof: a key restored with that id, signed with its
    /// own name, would hold the real holder's fold back for ever.
    pub fn carries_fold(&self, fold_id: u64, holder: &[u8]) -> bool {
        self.folds_carried_for(holder).any(|f| f == fold_id)
    }

    /// True when this key is a sealed holder renamed from `holder` whose fold is not
    /// acknowledged yet (an outbox fold entry debited under that name): the name is still
    /// being folded back, by this key.
    pub fn carries_a_fold_of(&self, holder: &[u8]) -> bool {
        self.folds_carried_for(holder).next().is_some()
    }

    /// The ids of the folds unacknowledged in this key's outbox that were debited under the
    /// name `holder`, when this key is sealed (none otherwise; a fold id is never 0).
    fn folds_carried_for<'a>(&'a self, holder: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
        let outbox = self.transfers().filter(|_| self.is_sealed());
        (outbox.into_iter().flat_map(|t| t.outbox.iter()))
            .filter(move |o| o.fold_id != 0 && o.from == holder)
            .map(|o| o.fold_id)
    }

    /// What a gather counts as this counter's floor when it is a holder: its floor plus the
    /// floor units of its fold not yet acknowledged (a sealed holder's floor until its home
    /// has it), as [`Counter::units_in_hand`] counts its value. Budget moves are left out: a
    /// move's receiver shows its floor when the credit lands. None when the counter has no
    /// floor and folds none, or on overflow.
    pub fn floor_in_hand(&self) -> Option<i64> {
        self.bound_in_hand(BudgetKind::Down)
    }

    /// [`Counter::floor_in_hand`]'s mirror: its ceiling plus the ceiling units of its fold not
    /// yet acknowledged. None when the counter has no ceiling and folds none, or on overflow.
    pub fn ceiling_in_hand(&self) -> Option<i64> {
        self.bound_in_hand(BudgetKind::Up)
    }

    /// Its bound of `kind` plus the units of that bound its unacknowledged fold carries.
    fn bound_in_hand(&self, kind: BudgetKind) -> Option<i64> {
        let own = kind.bound(self);
        let folding: Vec<i64> = self.transfers().map_or_else(Vec::new, |t| {
            t.outbox
                .iter()
                .filter(|o| o.fold_id != 0)
                .map(|o| kind.bound_units(o.units()))
                .collect()
        });
        if own.is_none() && folding.is_empty() {
            return None;
        }
        exact_sum(std::iter::once(own.unwrap_or(0)).chain(folding))
    }

    /// True when budget this counter may sell is still travelling, so that a purchase it
    /// refuses now may be granted once it lands: a holder of a floored spread before its first
    /// credit (`floor_if_none`, from its name: its share is on the way), or a counter whose own
    /// budget moves are unacknowledged (a home's shares right after a spread, a move to or
    /// from the home: those units are in no holder's budget until they land). Such a refusal is not
    /// final and must not be recorded against a token.
    /// A move counts while it is younger than [`MOVE_IN_FLIGHT_MS`] (its seq carries the time
    /// of its debit, [`next_seq`]).
    pub fn budget_in_flight(&self, floor_if_none: Option<i64>, now_ms: i64) -> bool {
        self.room_in_flight(BudgetKind::Down, floor_if_none, now_ms)
    }

    /// [`Counter::budget_in_flight`]'s mirror for a ceiling: true when up-budget this counter
    /// may take adds into is still travelling (a holder of a ceiled spread before its first
    /// credit, `ceiling_if_none` from its name, or a move of ceiling units out of it not yet
    /// acknowledged), so a positive add it refuses now may fit once it lands.
    pub fn up_budget_in_flight(&self, ceiling_if_none: Option<i64>, now_ms: i64) -> bool {
        self.room_in_flight(BudgetKind::Up, ceiling_if_none, now_ms)
    }

    /// Budget of `kind` still travelling to or from this counter: before its first credit of
    /// that bound (`bound_if_none`, from its name), or a move of it out not yet acknowledged.
    fn room_in_flight(&self, kind: BudgetKind, bound_if_none: Option<i64>, now_ms: i64) -> bool {
        let before_first_credit = kind.bound(self).is_none() && bound_if_none.is_some();
        let moving = |o: &Outgoing| kind.moved(o.units()) > 0;
        before_first_credit || self.budget_moves_out(now_ms).any(moving)
    }

    /// The budget moving out of this counter and not yet acknowledged, counted as
    /// [`Counter::budget_in_flight`] counts moves (a stuck one is no longer in flight): units
    /// that no holder's budget shows until the receiver's credit lands.
    pub fn budget_moving_out(&self, kind: BudgetKind, now_ms: i64) -> i64 {
        self.budget_moves_out(now_ms)
            .map(|o| kind.moved(o.units()).max(0))
            .fold(0, i64::saturating_add)
    }

    /// This counter's budget moves unacknowledged and younger than [`MOVE_IN_FLIGHT_MS`].
    fn budget_moves_out(&self, now_ms: i64) -> impl Iterator<Item = &Outgoing> {
        let since = now_ms.saturating_sub(MOVE_IN_FLIGHT_MS);
        self.transfers()
            .into_iter()
            .flat_map(|t| t.outbox.iter())
            .filter(move |o| o.fold_id == 0 && (o.df < 0 || o.dc > 0) && debited_ms(o.seq) >= since)
    }

    /// Moves the value by `dv`, the floor by `df` and the ceiling by `dc` (each headroom spread
    /// evenly over its budgets again). Floor units moved to or from a counter without a floor
    /// treat it as floor 0, as `CTR.DECRFLOOR` does: a fresh holder of a floored spread counter
    /// can receive budget; ceiling units likewise treat a counter without a ceiling as ceiling
    /// 0 (a fresh holder of a ceiled spread, held at 0 from above by its name). `make` makes
    /// the bound even when no unit of its kind moves. Checked before anything changes.
    fn shift(&mut self, u: Units, make: MadeBounds) -> Result<(), CounterError> {
        let value = self.value.checked_add(u.dv).ok_or(CounterError::Overflow)?;
        let floor = moved_bound(self.floor().map(|f| f.floor), u.df, make.floor)?;
        let ceiling = moved_bound(self.ceiling().map(|c| c.ceiling), u.dc, make.ceiling)?;
        if floor.is_some_and(|f| value < f) {
            return Err(CounterError::BelowFloor);
        }
        if ceiling.is_some_and(|c| value > c) {
            return Err(CounterError::AboveCeiling);
        }
        if let Some(f) = floor {
            value.checked_sub(f).ok_or(CounterError::Overflow)?;
        }
        if let Some(c) = ceiling {
            c.checked_sub(value).ok_or(CounterError::Overflow)?;
        }
        if let Some(first) = self.shards.first_mut() {
            *first = first.checked_add(u.dv).ok_or(CounterError::Overflow)?;
        }
        self.value = value;
        // Re-spread the headrooms over the budgets (checked above: cannot fail).
        if floor.is_some() {
            self.set_floor(floor)?;
        }
        if ceiling.is_some() {
            self.place_ceiling(ceiling)?;
        }
        Ok(())
    }

    /// Step 1 on the giver: debits (dv, df) and records the outbox entry to `receiver`.
    /// Refused when a transfer to that receiver is unacknowledged, or the debit is not possible.
    /// `giver` is this counter's key name and a random id that becomes its giver id when it
    /// has none yet.
    pub fn start_transfer(
        &mut self,
        receiver: &[u8],
        units: Units,
        now_ms: i64,
        giver: Giver,
    ) -> Result<Outgoing, TransferError> {
        if self.is_sealed() {
            return Err(TransferError::Sealed);
        }
        self.debit(receiver, units, now_ms, giver, 0)
    }

    /// Debits `units` and records the outbox entry (a move, or the fold `fold_id`).
    fn debit(
        &mut self,
        receiver: &[u8],
        units: Units,
        now_ms: i64,
        giver: Giver,
        fold_id: u64,
    ) -> Result<Outgoing, TransferError> {
        let Giver { name, new_id } = giver;
        let names_ok = [receiver, name]
            .iter()
            .all(|n| !n.is_empty() && n.len() <= MAX_NAME);
        if !names_ok || new_id == 0 {
            return Err(
                CounterError::InvalidOperation("transfer receiver or id out of range").into(),
            );
        }
        let t = self.transfers().cloned().unwrap_or_default();
        let slot = match t
            .outbox
            .binary_search_by(|o| o.receiver.as_slice().cmp(receiver))
        {
            Ok(_) => return Err(TransferError::Busy),
            Err(slot) => slot,
        };
        if fold_id == 0
            && moves_to_its_home(name, receiver)
            && t.outbox
                .iter()
                .any(|o| o.fold_id == 0 && moves_to_its_home(name, &o.receiver))
        {
            return Err(TransferError::Busy);
        }
        if t.outbox.len() >= MAX_ENTRIES {
            return Err(CounterError::InvalidOperation("too many transfers in flight").into());
        }
        let debit = units.negated().ok_or(CounterError::Overflow)?;
        self.shift(debit, MadeBounds::default())?;
        let entry = Outgoing {
            receiver: receiver.to_vec(),
            seq: next_seq(t.last_seq, now_ms),
            dv: units.dv,
            df: units.df,
            dc: units.dc,
            fold_id,
            from: self.signature(name).to_vec(),
        };
        let t = self.transfers_mut();
        if t.giver_id == 0 {
            t.giver_id = new_id;
        }
        t.last_seq = entry.seq;
        t.outbox.insert(slot, entry.clone());
        Ok(entry)
    }

    /// The name a transfer from the counter at `name` is signed with: a home signs with the
    /// home name its holders carry (its name when it spread, whatever it is called now).
    pub fn signature<'a>(&'a self, name: &'a [u8]) -> &'a [u8] {
        if parse_holder_name(name).is_some() {
            return name;
        }
        let current = self.spread().into_iter().flat_map(|s| s.holders.iter());
        let leaving = self.leaving().iter().map(|l| &l.name);
        carried_home(current.chain(leaving).map(Vec::as_slice)).unwrap_or(name)
    }

    /// The rule "a receiver applies only what it expects", for a credit not applied before
    /// (the credit's receiver is this counter's own key name). Judged on what the credit
    /// carries from its debit (its giver's name then, its fold) and on what never comes back
    /// once it is so (a fold ended, a holder sealed), so every copy of one credit gets one
    /// answer.
    /// - A fold credit: expected while this home lists its fold as leaving.
    /// - A budget move: never by a sealed receiver; a home expects its current and leaving
    ///   holders; a holder (by its name) its home only.
    pub fn expects(&self, credit: &Credit) -> bool {
        let me = credit.receiver.as_slice();
        let from = credit.from.as_slice();
        let t = self.transfers();
        if credit.fold_id != 0 {
            return t.is_some_and(|t| t.leaving_slot(credit.fold_id, from).is_some());
        }
        if self.is_sealed() {
            return false;
        }
        if let Some(holder) = parse_holder_name(me) {
            if !same_spread(me, from) {
                return false;
            }
            // From its home only: budget moves between holders go through the home
            // (`rebalance::through_the_home`), whose own move toward a holder is answered
            // before it asks that holder to seal (`messages_due`), so no move can outlive its
            // receiver. A sibling's move (a node from before that rule) is refused, whatever
            // this key is: a sibling's move could reach a key folded and expired meanwhile (a
            // partition longer than the sealed grace), fresh again, and "not yet" there would
            // hold it, and its giver's fold, for good. Refused for a reason that never
            // changes: no copy of it is applied later (one applied before is a repeat).
            return holder.home == from;
        }
        let current = self
            .spread()
            .is_some_and(|s| s.holders.iter().any(|h| h == from));
        current || t.is_some_and(|t| t.leaving.iter().any(|l| l.name == from))
    }

    /// True when this counter applied the credit `c` (or a later one of its giver) before.
    fn applied_before(&self, c: &Credit) -> bool {
        self.transfers()
            .is_some_and(|t| t.has_applied(c.giver_id, &c.from, c.seq))
    }

    /// A credit's outcome when it changes nothing (a repeat, or a refusal); None when it is
    /// to be applied. The glue asks this on a read, so that such answers write nothing.
    pub fn credit_outcome(&self, c: &Credit) -> Option<CreditOutcome> {
        if self.applied_before(c) {
            return Some(CreditOutcome::Repeat);
        }
        (!self.expects(c)).then_some(CreditOutcome::Refused)
    }

    /// The outcome of a credit at a receiver key that may be missing: a missing holder is a
    /// fresh counter (made by its first credit); a missing home is not yet there (renamed
    /// away, or deleted): never refused, since a refusal rolls a move back and the home may
    /// still apply it under its new name (its seal requests re-target folds).
    pub fn credit_outcome_at(receiver: Option<&Counter>, c: &Credit) -> Option<CreditOutcome> {
        match receiver {
            Some(counter) => counter.credit_outcome(c),
            None if parse_holder_name(&c.receiver).is_some() => Counter::plain(0).credit_outcome(c),
            None => Some(CreditOutcome::NotYet),
        }
    }

    /// The outcome of a credit addressed to a missing home name, at `home`, the counter that
    /// home lives on as under another name (a `RENAME`, found by the glue's renamed-home rule):
    /// a credit it applied under its former name is a repeat, answered so that the giver's
    /// entry clears (a failover of the giver's master may have lost the first answer after the
    /// rename); anything else is not yet (never applied or refused under a name it was not
    /// sent to).
    pub fn credit_outcome_at_renamed_home(home: &Counter, c: &Credit) -> CreditOutcome {
        if home.applied_before(c) {
            CreditOutcome::Repeat
        } else {
            CreditOutcome::NotYet
        }
    }

    /// Step 2 on the receiver: applies a credit it expects and has not applied before.
    /// A fold credit ends its holder's fold in the same write. Err: expected, but the units
    /// cannot be taken now (overflow, floor): nothing changes and the giver sends it again.
    pub fn apply_credit(&mut self, c: &Credit) -> Result<CreditOutcome, TransferError> {
        let names_ok = [&c.giver, &c.from]
            .iter()
            .all(|n| !n.is_empty() && n.len() <= MAX_NAME);
        if !names_ok || c.seq == 0 {
            return Err(CounterError::InvalidOperation("transfer credit out of range").into());
        }
        if let Some(outcome) = self.credit_outcome(c) {
            return Ok(outcome);
        }
        let t = self.transfers().cloned().unwrap_or_default();
        let known = t.inbox_slot(c.giver_id, &c.from);
        if known.is_err() && t.inbox.len() >= MAX_ENTRIES {
            return Err(CounterError::InvalidOperation("too many givers").into());
        }
        // A budget move's receiver is a holder of a bounded spread counter and must never cross
        // its bound, whatever it is sent, also when the move carries no units (a holder given a
        // share of 0), so its first credit makes it bounded (at 0 when it had no bound) as its
        // name or the units say.
        let budget_move = c.fold_id == 0;
        let by_name = bounds_by_name(&c.receiver);
        let ceiled = c.dc != 0 || by_name.ceiling.is_some();
        let floored = c.df != 0 || by_name.floor.is_some();
        // A spread from before ids names no floor: any move but a ceiled one floors it.
        let make = MadeBounds {
            floor: budget_move && (floored || !ceiled),
            ceiling: budget_move && ceiled,
        };
        self.shift(c.units(), make)?;
        let t = self.transfers_mut();
        match known {
            Ok(i) => t.inbox[i].seq = c.seq,
            Err(i) => t.inbox.insert(
                i,
                Applied {
                    giver_id: c.giver_id,
                    name: c.from.clone(),
                    seq: c.seq,
                },
            ),
        }
        if c.fold_id != 0 {
            if let Some(i) = t.leaving_slot(c.fold_id, &c.from) {
                t.leaving.remove(i);
            }
            self.mark_folded(&c.from);
            if let Some(h) = parse_holder_name(&c.from) {
                self.retire_spread(h.spread_id);
            }
        }
        Ok(CreditOutcome::Applied)
    }

    /// On a home, after the fold credit of `holder`: its place is marked when its spread is
    /// this home's current one ([`folded::fold_landed`]).
    fn mark_folded(&mut self, holder: &[u8]) {
        let Some(ext) = self.ext.as_deref_mut() else {
            return;
        };
        let spread = ext.spread.as_deref();
        if let Some(t) = ext.transfers.as_deref_mut() {
            let holders = spread.map_or(&[][..], |s| s.holders.as_slice());
            folded::fold_landed(t, spread.map(|s| s.id), holders, holder);
        }
    }

    /// On a home, after a fold credit: when the spread `spread_id` is no longer this home's
    /// (shrunk to 1, spread again under a new id) and none of its holders is leaving any more,
    /// every fold of it was applied here. Its givers' inbox entries then go, and the id is
    /// kept instead ([`Transfers::retired`]): a credit from a holder of it is a repeat from
    /// then on. That is exact: a holder seals only once its own moves are answered and sends
    /// nothing after its seal but its fold credit, so what such a holder (or a copy of it,
    /// DUMP/RESTORE, RENAME) can still send is a copy of a credit applied or answered already,
    /// and a spread id is never drawn again by this home while it is retired. Holders of the
    /// current spread keep their entries (the names must not be reused while their sealed keys
    /// may live). Spreads made before ids (0) are never retired. True when it retired one.
    pub fn retire_spread(&mut self, spread_id: u64) -> bool {
        let current = self.spread().map(|s| s.id);
        let Some(t) = self.ext.as_mut().and_then(|e| e.transfers.as_deref_mut()) else {
            return false;
        };
        let of_it = |name: &[u8]| parse_holder_name(name).is_some_and(|h| h.spread_id == spread_id);
        if spread_id == 0
            || current == Some(spread_id)
            || t.retired.contains(&spread_id)
            || t.leaving.iter().any(|l| of_it(&l.name))
        {
            return false;
        }
        t.inbox.retain(|e| !of_it(&e.name));
        t.inbox.shrink_to_fit();
        folded::forget_spread(t, spread_id);
        t.leaving.shrink_to_fit();
        if t.retired.len() >= MAX_RETIRED {
            t.retired.remove(0);
        }
        t.retired.push(spread_id);
        true
    }

    /// True when this home retired the spread `spread_id` ([`Counter::retire_spread`]): a new
    /// spread must draw another id.
    pub fn has_retired(&self, spread_id: u64) -> bool {
        self.transfers()
            .is_some_and(|t| t.retired.contains(&spread_id))
    }

    /// Step 3 on the giver: forgets the outbox entry to `receiver` when it is the one of
    /// `seq`. True when something was removed.
    pub fn apply_ack(&mut self, receiver: &[u8], seq: u64) -> bool {
        self.take_outgoing(receiver, seq).is_some()
    }

    /// Removes the outbox entry (receiver, seq) and returns it.
    fn take_outgoing(&mut self, receiver: &[u8], seq: u64) -> Option<Outgoing> {
        let t = self.ext.as_mut().and_then(|e| e.transfers.as_deref_mut())?;
        let i = t
            .outbox
            .iter()
            .position(|o| o.receiver == receiver && o.seq == seq)?;
        let taken = t.outbox.remove(i);
        self.trim_transfers();
        Some(taken)
    }

    /// On the giver, when the receiver refused a credit: a budget move is rolled back (its
    /// units come back here, so none is lost); a fold is kept and sent again (its home may
    /// have moved: see [`Counter::seal_into`]). True when a move was rolled back. The entry is
    /// known (receiver and seq match), so the rollback reverses exactly the debit.
    pub fn apply_refusal(&mut self, receiver: &[u8], seq: u64) -> Result<bool, TransferError> {
        let entry = self
            .transfers()
            .and_then(|t| t.outgoing_to(receiver))
            .filter(|o| o.seq == seq && o.fold_id == 0)
            .cloned();
        let Some(entry) = entry else {
            return Ok(false);
        };
        let before = self.clone();
        self.take_outgoing(receiver, seq);
        if let Err(e) = self.shift(entry.units(), MadeBounds::default()) {
            *self = before;
            return Err(e.into());
        }
        Ok(true)
    }

    /// Step 3 on the giver, either answer: an acknowledgement forgets the outbox entry, a
    /// refusal rolls a budget move back (a refused fold is kept and sent again).
    pub fn apply_answer(&mut self, ack: &Ack) -> Result<AckEffect, TransferError> {
        if ack.refused {
            return Ok(match self.apply_refusal(&ack.receiver, ack.seq)? {
                true => AckEffect::RolledBack,
                false => AckEffect::Nothing,
            });
        }
        if !self.apply_ack(&ack.receiver, ack.seq) {
            return Ok(AckEffect::Nothing);
        }
        let sealed_and_done =
            self.is_sealed() && self.transfers().is_none_or(|t| t.outbox.is_empty());
        Ok(AckEffect::Acknowledged { sealed_and_done })
    }

    /// True when `ack` would change this giver (what the glue asks on a read first).
    pub fn answer_matters(&self, ack: &Ack) -> bool {
        self.transfers()
            .and_then(|t| t.outgoing_to(&ack.receiver))
            .is_some_and(|o| o.seq == ack.seq && (!ack.refused || o.fold_id == 0))
    }

    /// What the counter at `name` has to send: a seal request per holder still leaving it (a
    /// home), a credit per unacknowledged transfer (a giver).
    pub fn messages_due(&self, name: &[u8]) -> (Vec<Seal>, Vec<Credit>) {
        let Some(t) = self.transfers() else {
            return (Vec::new(), Vec::new());
        };
        // A leaving holder is asked to seal only once this home's own move toward it was
        // answered: a move that arrives after the fold would have nothing to land on.
        let moving_to = |name: &[u8]| t.outbox.iter().any(|o| o.receiver == name);
        let seals = t
            .leaving
            .iter()
            .filter(|l| !moving_to(&l.name))
            .map(|l| Seal {
                home: name.to_vec(),
                holder: l.name.clone(),
                fold_id: l.fold_id,
            })
            .collect();
        let credits = t
            .outbox
            .iter()
            .map(|o| Credit {
                giver: name.to_vec(),
                from: if o.from.is_empty() {
                    name.to_vec()
                } else {
                    o.from.clone()
                },
                receiver: o.receiver.clone(),
                giver_id: t.giver_id,
                seq: o.seq,
                dv: o.dv,
                df: o.df,
                dc: o.dc,
                fold_id: o.fold_id,
            })
            .collect();
        (seals, credits)
    }

    /// On the home: lists `holders` as leaving (they must already be out of its holder list),
    /// each with a fresh fold id from `new_fold_id` (nonzero, random).
    pub fn begin_fold(
        &mut self,
        holders: &[Vec<u8>],
        new_fold_id: &mut dyn FnMut() -> u64,
    ) -> Result<(), CounterError> {
        let t = self.transfers_mut();
        for h in holders {
            if !t.leaving.iter().any(|l| &l.name == h) {
                let fold_id = new_fold_id();
                if fold_id <= LEGACY_FOLD {
                    return Err(CounterError::InvalidOperation("fold id out of range"));
                }
                t.leaving.push(Leaving {
                    name: h.clone(),
                    fold_id,
                });
            }
        }
        let result = t.validate();
        if result.is_err() {
            self.trim_transfers();
        }
        result
    }

    /// On a spread home: keeps the first `holders - 1` holders and lists the others as
    /// leaving; returns the ones that leave. With 1, the counter stops being spread (its Spread
    /// state goes; the folds finish from `leaving`).
    pub fn begin_shrink(
        &mut self,
        holders: usize,
        new_fold_id: &mut dyn FnMut() -> u64,
    ) -> Result<Vec<Vec<u8>>, CounterError> {
        self.shrink_listed(holders, new_fold_id, None)
    }

    /// [`Counter::begin_shrink`], recording the change in the home's listing dated by
    /// `clock`; None (a step from a version that did not date shrinks) forgets the listing.
    pub fn shrink_listed(
        &mut self,
        holders: usize,
        new_fold_id: &mut dyn FnMut() -> u64,
        clock: Option<ListClock>,
    ) -> Result<Vec<Vec<u8>>, CounterError> {
        let Some(spread) = self.spread().cloned() else {
            return Ok(Vec::new());
        };
        let keep = holders.saturating_sub(1).min(spread.holders.len());
        let (kept, gone) = spread.holders.split_at(keep);
        let gone = gone.to_vec();
        let before = self.clone();
        let ext = self.ext_mut();
        ext.spread = (!kept.is_empty()).then(|| {
            Box::new(super::Spread {
                id: spread.id,
                holders: kept.to_vec(),
                ..spread.clone()
            })
        });
        if let Err(e) = self.begin_fold(&gone, new_fold_id) {
            *self = before;
            return Err(e);
        }
        if !gone.is_empty() {
            self.relist(&spread.holders, kept, true, clock);
        }
        Ok(gone)
    }

    /// Makes this counter the home of `spread` ([`Counter::set_spread`]) and records the
    /// holders it lists from now on in its listing, dated by `clock`.
    pub fn list_spread(
        &mut self,
        spread: super::Spread,
        clock: ListClock,
    ) -> Result<(), CounterError> {
        let before = self.spread().map(|s| s.holders.clone()).unwrap_or_default();
        let had_holders = self.spread().is_some() || self.transfers().is_some();
        let holders = spread.holders.clone();
        self.set_spread(spread)?;
        self.relist(&before, &holders, had_holders, Some(clock));
        Ok(())
    }

    /// Records a change of the holder list from `before` to `holders`. A home without a
    /// listing starts one: complete when it never had holders, else answering from this
    /// change on. Without a clock, or with a name it cannot keep, the listing is forgotten.
    fn relist(
        &mut self,
        before: &[Vec<u8>],
        holders: &[Vec<u8>],
        had_holders: bool,
        clock: Option<ListClock>,
    ) {
        let t = self.transfers_mut();
        let kept = t.listing.take();
        t.listing = clock.and_then(|clock| {
            let mut listing = match kept {
                Some(listing) => listing,
                None if had_holders => Listing::started(before, clock)?,
                None => Listing::complete(),
            };
            listing.record(holders, clock)?;
            Some(listing)
        });
        self.trim_transfers();
    }

    /// The holders in force at `at` (the home not included), by index: the list a purchase
    /// of that time walks (`CTR.HOLDERS key AT ms`). `now` is this master's clock.
    pub fn holders_at(&self, at: i64, now: i64) -> Result<Vec<Vec<u8>>, ListedAtError> {
        match self.transfers().and_then(|t| t.listing.as_ref()) {
            Some(listing) => listing.at(at, now),
            None if at > now => Err(ListedAtError::Ahead { now }),
            None if self.spread().is_none() && self.transfers().is_none() => Ok(Vec::new()),
            None => Err(ListedAtError::Unknown {
                known_since: i64::MAX,
            }),
        }
    }

    /// Holders still folding back into this home.
    pub fn leaving(&self) -> &[Leaving] {
        self.transfers().map_or(&[], |t| t.leaving.as_slice())
    }

    /// On a holder: seals it into `home` for the fold `fold_id`, making everything it holds
    /// (value and floor) one transfer to the home. Waits (Busy) while any transfer of its own
    /// is unacknowledged, so a fold never overlaps a budget move of the same holder. A holder
    /// sealed for the same fold under another home name (the home was renamed) re-targets its
    /// fold there, same seq: only a home listing that fold applies it. Ok(None) when sealed
    /// already for this fold into this home.
    pub fn seal_into(
        &mut self,
        home: &[u8],
        fold_id: u64,
        now_ms: i64,
        giver: Giver,
    ) -> Result<Option<Outgoing>, TransferError> {
        if let Some(into) = self.transfers().and_then(|t| t.sealed_into.clone()) {
            return self.retarget_fold(&into, home, fold_id);
        }
        if fold_id == 0 {
            return Err(CounterError::InvalidOperation("fold id 0").into());
        }
        if self.transfers().is_some_and(|t| !t.outbox.is_empty()) {
            return Err(TransferError::Busy);
        }
        let units = Units {
            dv: self.value,
            df: self.floor().map_or(0, |f| f.floor),
            dc: self.ceiling().map_or(0, |c| c.ceiling),
        };
        let entry = self.debit(home, units, now_ms, giver, fold_id)?;
        self.transfers_mut().sealed_into = Some(home.to_vec());
        Ok(Some(entry))
    }

    /// On a holder asked to seal by its home under `home`, before [`Counter::seal_into`]: a
    /// budget move of its own toward its home under another name (the home was renamed since;
    /// a holder moves budget only to its home or to holders, so a receiver that is not a
    /// holder name is its home) goes to `home` instead, same seq: the renamed home applies it
    /// once (it deduplicates by the giver's id), and the holder seals once it is answered.
    /// True when a move was re-targeted (a write).
    pub fn retarget_moves_to(&mut self, home: &[u8]) -> bool {
        if !self.has_move_to_former_home(home) {
            return false;
        }
        let t = self.transfers_mut();
        let Some(i) = t.outbox.iter().position(|o| is_to_former_home(o, home)) else {
            return false;
        };
        let mut entry = t.outbox.remove(i);
        entry.receiver = home.to_vec();
        let slot = t
            .outbox
            .binary_search_by(|o| o.receiver.as_slice().cmp(home))
            .unwrap_or_else(|slot| slot);
        t.outbox.insert(slot, entry);
        true
    }

    /// True when [`Counter::retarget_moves_to`] would change something (one move per pair: not
    /// while a move to `home` itself is unanswered).
    pub fn has_move_to_former_home(&self, home: &[u8]) -> bool {
        let Some(t) = self.transfers() else {
            return false;
        };
        let name_ok = !home.is_empty() && home.len() <= MAX_NAME;
        name_ok
            && t.outbox.iter().any(|o| is_to_former_home(o, home))
            && !t.outbox.iter().any(|o| o.receiver == home)
    }

    fn retarget_fold(
        &mut self,
        into: &[u8],
        home: &[u8],
        fold_id: u64,
    ) -> Result<Option<Outgoing>, TransferError> {
        let t = self.transfers_mut();
        let pending = t.outbox.iter().position(|o| o.fold_id != 0);
        let same_fold = pending.is_some_and(|i| t.outbox[i].fold_id == fold_id);
        if into == home {
            return if pending.is_none() || same_fold {
                Ok(None)
            } else {
                Err(TransferError::Sealed)
            };
        }
        let Some(i) = pending.filter(|_| same_fold) else {
            return Err(TransferError::Sealed);
        };
        if home.is_empty() || home.len() > MAX_NAME {
            return Err(CounterError::InvalidOperation("transfer receiver name length").into());
        }
        if t.outbox.iter().any(|o| o.receiver == home) {
            return Err(TransferError::Busy);
        }
        let mut entry = t.outbox.remove(i);
        entry.receiver = home.to_vec();
        let slot = t
            .outbox
            .binary_search_by(|o| o.receiver.as_slice().cmp(home))
            .unwrap_or_else(|slot| slot);
        t.outbox.insert(slot, entry.clone());
        t.sealed_into = Some(home.to_vec());
        Ok(Some(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::holder_name;

    const HOME: &[u8] = b"k";

    fn holder(i: usize) -> Vec<u8> {
        holder_name(HOME, 7, i, 0)
    }

    /// A giver's stamp: the name it debits under does not matter to these tests (their
    /// credits say who sent them).
    fn g(new_id: u64) -> Giver<'static> {
        Giver { name: b"g", new_id }
    }

    /// `o`'s credit as sent by a giver that debited under the name `giver`.
    fn credit(giver: &[u8], receiver: &[u8], giver_id: u64, o: &Outgoing) -> Credit {
        Credit {
            giver: giver.to_vec(),
            from: giver.to_vec(),
            receiver: receiver.to_vec(),
            giver_id,
            seq: o.seq,
            dv: o.dv,
            df: o.df,
            dc: o.dc,
            fold_id: o.fold_id,
        }
    }

    /// Sends `o` from `giver` (named `from`) to `receiver` (named `to`).
    fn send(
        giver: &Counter,
        from: &[u8],
        receiver: &mut Counter,
        to: &[u8],
        o: &Outgoing,
    ) -> Result<CreditOutcome, TransferError> {
        let id = giver.transfers().map_or(0, |t| t.giver_id);
        receiver.apply_credit(&credit(from, to, id, o))
    }

    fn fold_ids() -> impl FnMut() -> u64 {
        let mut next = 100;
        move || {
            next += 1;
            next
        }
    }

    #[test]
    fn a_transfer_moves_units_once_whatever_repeats() {
        let h2 = holder(2);
        let mut giver = Counter::plain(10);
        let mut receiver = Counter::plain(5);
        receiver.set_floor(Some(0)).unwrap();
        let out = giver
            .start_transfer(&h2, Units::value_and_floor(4, 0), 1, g(9))
            .unwrap();
        assert_eq!(giver.value(), 6);
        assert_eq!(giver.transfers().unwrap().giver_id, 9);
        assert_eq!(
            giver.units_in_hand(),
            Some(10),
            "in flight counts at the giver"
        );
        assert_eq!(
            giver.start_transfer(&h2, Units::value_and_floor(1, 0), 2, g(9)),
            Err(TransferError::Busy),
            "one at a time per pair"
        );
        let sent = send(&giver, HOME, &mut receiver, &h2, &out);
        assert_eq!(sent, Ok(CreditOutcome::Applied));
        let again = send(&giver, HOME, &mut receiver, &h2, &out);
        assert_eq!(again, Ok(CreditOutcome::Repeat));
        assert_eq!(receiver.value(), 9);
        assert!(giver.apply_ack(&h2, out.seq));
        assert!(!giver.apply_ack(&h2, out.seq));
        assert_eq!(giver.units_in_hand(), Some(6));
        assert!(giver.transfers().unwrap().outbox.is_empty());
        let next = giver
            .start_transfer(&h2, Units::value_and_floor(1, 0), 1, g(5))
            .unwrap();
        assert!(next.seq > out.seq, "seqs grow even when the clock does not");
        assert_eq!(giver.transfers().unwrap().giver_id, 9, "the id is kept");
        send(&giver, HOME, &mut receiver, &h2, &next).unwrap();
        assert_eq!(receiver.value(), 10);
        assert_eq!(receiver.transfers().unwrap().applied_from(9, b""), next.seq);
    }

    /// A holder's move to its home, applied there, whose answer a failover of the holder's
    /// master lost after the home was renamed: the renamed home answers the resend to the old
    /// name as a repeat (the giver's entry clears); a credit it never applied waits.
    #[test]
    fn a_renamed_home_answers_a_credit_it_applied_under_its_former_name() {
        let h1 = holder(1);
        let mut giver = Counter::plain(10);
        giver.set_floor(Some(0)).unwrap();
        let mut home = Counter::plain(0);
        home.set_spread(crate::counter::Spread {
            id: 7,
            holders: vec![h1.clone()],
            floor: None,
            ceiling: None,
        })
        .unwrap();
        let out = giver
            .start_transfer(HOME, Units::value_and_floor(3, 0), 1, g(9))
            .unwrap();
        assert_eq!(
            send(&giver, &h1, &mut home, HOME, &out),
            Ok(CreditOutcome::Applied)
        );
        let resent = credit(&h1, HOME, 9, &out);
        assert_eq!(
            Counter::credit_outcome_at_renamed_home(&home, &resent),
            CreditOutcome::Repeat
        );
        assert!(
            giver.apply_ack(HOME, out.seq),
            "the repeat's answer clears it"
        );
        let next = giver
            .start_transfer(HOME, Units::value_and_floor(2, 0), 2, g(9))
            .unwrap();
        assert_eq!(
            Counter::credit_outcome_at_renamed_home(&home, &credit(&h1, HOME, 9, &next)),
            CreditOutcome::NotYet,
            "never applied under a name it was not sent to"
        );
        assert_eq!(home.value(), 3);
    }

    /// A refusal waits for budget (retryable, never recorded) only while budget travels: before
    /// a floored holder's first credit, or while the counter's own move is unacknowledged.
    #[test]
    fn a_purchase_waits_for_budget_only_while_budget_travels() {
        const NOW: i64 = 1_000_000;
        let by_name = Some(0);
        assert!(
            purchase_waits_for_budget(None, 1, by_name, NOW),
            "missing holder, share on the way"
        );
        assert!(
            !purchase_waits_for_budget(None, 1, None, NOW),
            "a missing plain key is sold out"
        );
        let fresh = Counter::plain(3);
        assert!(
            !purchase_waits_for_budget(Some(&fresh), 3, by_name, NOW),
            "it can grant"
        );
        assert!(
            purchase_waits_for_budget(Some(&fresh), 4, by_name, NOW),
            "before its first credit"
        );
        assert!(
            !purchase_waits_for_budget(Some(&fresh), 4, None, NOW),
            "unfloored, unspread"
        );
        let mut giver = Counter::plain(10);
        giver.set_floor(Some(0)).unwrap();
        assert!(
            !purchase_waits_for_budget(Some(&giver), 11, by_name, NOW),
            "credited, nothing moving"
        );
        let out = giver
            .start_transfer(&holder(2), Units::value_and_floor(0, -6), NOW, g(9))
            .unwrap();
        assert!(
            purchase_waits_for_budget(Some(&giver), 5, by_name, NOW),
            "6 units in flight"
        );
        assert!(
            !purchase_waits_for_budget(Some(&giver), 4, by_name, NOW),
            "it can grant"
        );
        let stuck = NOW + MOVE_IN_FLIGHT_MS + 1;
        assert!(
            !purchase_waits_for_budget(Some(&giver), 5, by_name, stuck),
            "a move unanswered that long no longer holds refusals back"
        );
        assert!(giver.apply_ack(&holder(2), out.seq));
        assert!(
            !purchase_waits_for_budget(Some(&giver), 5, by_name, NOW),
            "landed: sold out here"
        );
    }

    /// Only a sealed holder with its fold unacknowledged carries that fold.
    #[test]
    fn a_sealed_holder_carries_its_fold_until_acknowledged() {
        let mut holder = Counter::plain(30);
        assert!(!holder.carries_fold(42, b"g"), "not sealed");
        let fold = holder.seal_into(HOME, 42, 1, g(9)).unwrap().unwrap();
        assert!(holder.carries_fold(42, b"g"));
        assert!(!holder.carries_fold(42, b"h"), "another holder's");
        assert!(!holder.carries_fold(43, b"g"), "another fold");
        assert!(!holder.carries_fold(0, b"g"));
        assert!(holder.apply_ack(HOME, fold.seq));
        assert!(!holder.carries_fold(42, b"g"), "its home has it");
    }

    /// A sealed holder's floor counts where its fold is in flight, as its value does; a budget
    /// move's does not (its receiver counts it once credited).
    #[test]
    fn a_sealed_holders_floor_is_in_hand_until_its_fold_is_acknowledged() {
        let mut holder = Counter::plain(50);
        assert_eq!(holder.floor_in_hand(), None, "no floor");
        holder.set_floor(Some(-225)).unwrap();
        let moved = holder
            .start_transfer(
                &holder_name(HOME, 7, 2, 0),
                Units::value_and_floor(0, -5),
                1,
                g(9),
            )
            .unwrap();
        assert_eq!(holder.floor_in_hand(), Some(-220), "a move is not in hand");
        assert!(holder.apply_ack(&moved.receiver, moved.seq));
        let fold = holder.seal_into(HOME, 42, 2, g(9)).unwrap().unwrap();
        assert_eq!(holder.floor().map(|f| f.floor), Some(0));
        assert_eq!(holder.floor_in_hand(), Some(-220), "the fold is in hand");
        assert_eq!(holder.units_in_hand(), Some(50));
        assert!(holder.apply_ack(HOME, fold.seq));
        assert_eq!(holder.floor_in_hand(), Some(0), "the home has it");
    }

    /// A giver copied under another name (DUMP/RESTORE) or renamed keeps its id: its credit is
    /// a repeat wherever the original's was applied.
    #[test]
    fn a_copy_of_a_giver_under_another_name_credits_nothing() {
        let (h2, h3) = (holder(2), holder(3));
        let mut giver = Counter::plain(10);
        giver.set_floor(Some(0)).unwrap();
        let out = giver
            .start_transfer(&h2, Units::value_and_floor(0, -4), 1, g(9))
            .unwrap();
        let copy = giver.clone();
        let mut receiver = Counter::plain(0);
        receiver.set_floor(Some(0)).unwrap();
        assert_eq!(
            send(&giver, HOME, &mut receiver, &h2, &out),
            Ok(CreditOutcome::Applied)
        );
        assert_eq!(
            send(&copy, &h3, &mut receiver, &h2, &out),
            Ok(CreditOutcome::Repeat)
        );
        assert_eq!(receiver.floor().unwrap().floor, -4);
    }

    #[test]
    fn a_receiver_refuses_what_it_does_not_expect() {
        let (h1, h2) = (holder(1), holder(2));
        let stranger = holder_name(HOME, 8, 1, 0);
        let mut giver = Counter::plain(10);
        giver.set_floor(Some(0)).unwrap();
        let out = giver
            .start_transfer(&h2, Units::value_and_floor(0, -4), 1, g(9))
            .unwrap();
        let before = Counter::plain(3);
        // Another spread's holder, a holder from another home (to a home), a plain key, a
        // home that does not list the giver: nothing changes.
        for (to, from) in [
            (h2.clone(), stranger.clone()),
            (holder_name(b"j", 7, 2, 0), b"j2".to_vec()),
            (b"plain".to_vec(), h1.clone()),
            (HOME.to_vec(), h1.clone()),
        ] {
            let mut receiver = before.clone();
            assert_eq!(
                send(&giver, &from, &mut receiver, &to, &out),
                Ok(CreditOutcome::Refused),
                "{to:?} from {from:?}"
            );
            assert_eq!(receiver, before);
        }
        // A forged fold credit: no home lists it.
        let mut forged = out.clone();
        forged.fold_id = 555;
        let mut home = Counter::plain(0);
        home.begin_fold(std::slice::from_ref(&h1), &mut fold_ids())
            .unwrap();
        assert_eq!(
            send(&giver, &h1, &mut home, HOME, &forged),
            Ok(CreditOutcome::Refused)
        );
        // The refused move is rolled back at the giver: its budget is whole again.
        assert_eq!(giver.apply_refusal(&h2, out.seq), Ok(true));
        assert_eq!((giver.value(), giver.floor().unwrap().floor), (10, 0));
        assert!(giver.transfers().is_none_or(|t| t.outbox.is_empty()));
        assert_eq!(giver.apply_refusal(&h2, out.seq), Ok(false), "once");
    }

    #[test]
    fn seqs_grow_across_a_givers_lives() {
        let mut first = Counter::plain(3);
        let a = first
            .start_transfer(b"r", Units::value_and_floor(1, 0), 1_000, g(1))
            .unwrap();
        let mut again = Counter::plain(3);
        let b = again
            .start_transfer(b"r", Units::value_and_floor(1, 0), 1_001, g(1))
            .unwrap();
        assert!(b.seq > a.seq);
        assert_eq!(next_seq(u64::MAX, 5), u64::MAX);
        assert_eq!(next_seq(7, -5), 8);
    }

    #[test]
    fn refused_steps_change_nothing() {
        let mut giver = Counter::plain(i64::MIN);
        let before = giver.clone();
        assert!(
            giver
                .start_transfer(b"r", Units::value_and_floor(1, 0), 1, g(1))
                .is_err(),
            "overflow"
        );
        assert!(
            giver
                .start_transfer(b"r", Units::value_and_floor(0, 1), 1, g(1))
                .is_err(),
            "no floor"
        );
        assert!(giver
            .start_transfer(b"", Units::value_and_floor(0, 0), 1, g(1))
            .is_err());
        assert!(
            giver
                .start_transfer(b"r", Units::value_and_floor(0, 0), 1, g(0))
                .is_err(),
            "giver id 0"
        );
        assert_eq!(giver, before);
        let mut floored = Counter::plain(10);
        floored.set_floor(Some(4)).unwrap();
        let before = floored.clone();
        assert!(
            floored
                .start_transfer(b"r", Units::value_and_floor(7, 0), 1, g(1))
                .is_err(),
            "below floor"
        );
        assert_eq!(floored, before);
        let mut receiver = Counter::plain(i64::MAX);
        let h2 = holder(2);
        let before = receiver.clone();
        let c = Credit {
            giver: HOME.to_vec(),
            from: HOME.to_vec(),
            receiver: h2.clone(),
            giver_id: 3,
            seq: 1,
            dv: 1,
            df: 0,
            dc: 0,
            fold_id: 0,
        };
        assert!(receiver.apply_credit(&c).is_err());
        assert!(
            receiver.apply_credit(&Credit { seq: 0, ..c }).is_err(),
            "seq 0"
        );
        assert_eq!(receiver, before);
    }

    #[test]
    fn budget_moves_shift_floors_and_keep_budgets_summing() {
        let mut giver = Counter::from_shards(vec![10, 10]).unwrap();
        giver.set_floor(Some(0)).unwrap();
        let mut receiver = Counter::plain(0);
        receiver.set_floor(Some(0)).unwrap();
        // dv = 0, df = -5: the giver's floor rises by 5, the receiver's falls by 5.
        let h1 = holder(1);
        let out = giver
            .start_transfer(&h1, Units::value_and_floor(0, -5), 1, g(1))
            .unwrap();
        assert_eq!(giver.floor().unwrap().floor, 5);
        assert_eq!(giver.floor().unwrap().budgets.iter().sum::<i64>(), 15);
        send(&giver, HOME, &mut receiver, &h1, &out).unwrap();
        assert_eq!(receiver.floor().unwrap().floor, -5);
        assert_eq!(receiver.floor().unwrap().budgets, vec![5]);
    }

    #[test]
    fn floor_units_reach_a_counter_without_a_floor_as_floor_0() {
        let (h1, h2) = (holder(1), holder(2));
        let mut giver = Counter::plain(10);
        giver.set_floor(Some(0)).unwrap();
        // A fresh holder: no key yet (a plain 0), no floor.
        let mut receiver = Counter::plain(0);
        let out = giver
            .start_transfer(&h1, Units::value_and_floor(0, -4), 1, g(1))
            .unwrap();
        send(&giver, HOME, &mut receiver, &h1, &out).unwrap();
        assert_eq!(receiver.floor().map(|f| f.floor), Some(-4));
        assert_eq!(receiver.floor().unwrap().budgets, vec![4]);
        // The other way, from a floorless counter, it needs the value to cover the new floor.
        let mut floorless = Counter::plain(3);
        assert_eq!(
            floorless.start_transfer(b"r2", Units::value_and_floor(0, -4), 2, g(1)),
            Err(TransferError::Counter(CounterError::BelowFloor)),
            "floor 0 + 4 is above the value 3"
        );
        assert_eq!((floorless.value(), floorless.floor()), (3, None));
        floorless
            .start_transfer(b"r2", Units::value_and_floor(0, -3), 3, g(1))
            .unwrap();
        assert_eq!(floorless.floor().map(|f| f.floor), Some(3));
        // Value units alone leave a floorless counter floorless.
        let mut plain = Counter::plain(1);
        let c = Credit {
            giver: HOME.to_vec(),
            from: HOME.to_vec(),
            receiver: h2.clone(),
            giver_id: 4,
            seq: 5,
            dv: 2,
            df: 0,
            dc: 0,
            fold_id: 0,
        };
        assert_eq!(plain.apply_credit(&c), Ok(CreditOutcome::Applied));
        assert_eq!(plain.value(), 3);
    }

    /// A budget move of 0 units (a holder with a share of 0, or added by growing) still makes
    /// its receiver floored at 0, so it refuses to go below it before it ever holds budget; a
    /// fold of an empty holder into an unfloored home leaves the home unfloored.
    #[test]
    fn a_budget_move_of_nothing_makes_its_receiver_floored_and_a_fold_does_not() {
        let h1 = holder(1);
        let mut home = Counter::plain(0);
        home.set_floor(Some(0)).unwrap();
        let mut fresh = Counter::plain(0);
        let out = home
            .start_transfer(&h1, Units::value_and_floor(0, 0), 1, g(1))
            .unwrap();
        send(&home, HOME, &mut fresh, &h1, &out).unwrap();
        assert_eq!(fresh.floor().map(|f| f.floor), Some(0));

        let mut unfloored = Counter::plain(7);
        unfloored
            .begin_fold(std::slice::from_ref(&h1), &mut fold_ids())
            .unwrap();
        let fold = unfloored.leaving()[0].fold_id;
        let mut empty = Counter::plain(0);
        let out = empty.seal_into(HOME, fold, 2, g(3)).unwrap().unwrap();
        send(&empty, &h1, &mut unfloored, HOME, &out).unwrap();
        assert_eq!((unfloored.value(), unfloored.floor()), (7, None));
        assert!(unfloored.leaving().is_empty());
    }

    /// A home shrunk to 1 whose folds all landed is a counter of its own again and takes a
    /// ceiling, though it keeps its retired id and listing; while it lists or folds holders,
    /// and on a holder that took a credit, a ceiling is refused.
    #[test]
    fn a_ceiling_waits_until_the_spread_ended() {
        let h1 = holder(1);
        let mut home = Counter::plain(2);
        let listed = |holders: Vec<Vec<u8>>| crate::counter::Spread {
            id: 7,
            holders,
            floor: None,
            ceiling: None,
        };
        let clock = ListClock {
            now_ms: 1_000,
            window_ms: 60_000,
        };
        home.list_spread(listed(vec![h1.clone()]), clock).unwrap();
        let refused = Err(CounterError::CeilingOnSpread);
        assert_eq!(home.set_ceiling(Some(50)), refused, "listing holders");
        home.begin_shrink(1, &mut fold_ids()).unwrap();
        assert_eq!(home.set_ceiling(Some(50)), refused, "folding one back");
        let fold = home.leaving()[0].fold_id;
        let mut holder1 = Counter::plain(4);
        let out = holder1.seal_into(HOME, fold, 6, g(11)).unwrap().unwrap();
        send(&holder1, &h1, &mut home, HOME, &out).unwrap();
        assert!(home.has_retired(7) && home.transfers().is_some());
        assert_eq!(home.set_ceiling(Some(50)), Ok(true));
        assert_eq!(home.ceiling().map(|c| c.ceiling), Some(50));
        // A holder that took a credit is a member: its bounds are its spread's shares.
        let mut giver = Counter::plain(5);
        giver.set_floor(Some(0)).unwrap();
        let out = giver
            .start_transfer(&h1, Units::floor(-2), 1, g(3))
            .unwrap();
        let mut taker = Counter::plain(0);
        send(&giver, HOME, &mut taker, &h1, &out).unwrap();
        assert_eq!(taker.set_ceiling(Some(9)), refused);
        assert_eq!(giver.set_ceiling(Some(9)), refused, "its move unanswered");
    }

    /// A ceiled spread's holder `i` (its name says the ceiling: attempts from
    /// [`crate::counter::spread::CEILED_ATTEMPTS`]); an even id, so unfloored.
    fn ceiled_holder(i: usize) -> Vec<u8> {
        holder_name(HOME, 8, i, crate::counter::spread::CEILED_ATTEMPTS)
    }

    /// A move of up-budget lowers the giver's ceiling at its debit and raises the receiver's
    /// at its credit (a fresh holder's from the 0 its name holds it to), once whatever repeats;
    /// a giver cannot give more up-budget than it has.
    #[test]
    fn ceiling_units_move_once_from_the_givers_ceiling_to_the_receivers() {
        let h1 = ceiled_holder(1);
        let mut home = Counter::plain(10);
        home.set_ceiling(Some(40)).unwrap();
        assert_eq!(
            home.start_transfer(&h1, Units::ceiling(31), 1, g(1)),
            Err(TransferError::Counter(CounterError::AboveCeiling)),
            "30 units of room, not 31"
        );
        let out = home
            .start_transfer(&h1, Units::ceiling(12), 1, g(1))
            .unwrap();
        assert_eq!(home.ceiling().map(|c| c.ceiling), Some(28));
        assert!(home.up_budget_in_flight(None, 1), "its room travels");
        let mut fresh = Counter::plain(-3);
        assert_eq!(
            send(&home, HOME, &mut fresh, &h1, &out),
            Ok(CreditOutcome::Applied)
        );
        assert_eq!(fresh.ceiling().map(|c| c.ceiling), Some(12));
        assert_eq!(
            fresh.floor(),
            None,
            "a ceiled spread's holder is not floored"
        );
        assert_eq!(
            send(&home, HOME, &mut fresh, &h1, &out),
            Ok(CreditOutcome::Repeat)
        );
        assert_eq!(fresh.ceiling().map(|c| c.ceiling), Some(12));
        assert!(home.apply_ack(&h1, out.seq));
        assert!(!home.up_budget_in_flight(None, 1));
        // A doubly bounded move carries both kinds in one credit.
        let mut both = Counter::plain(10);
        both.set_floor(Some(0)).unwrap();
        both.set_ceiling(Some(20)).unwrap();
        let h2 = holder_name(HOME, 9, 2, crate::counter::spread::CEILED_ATTEMPTS);
        let units = Units {
            dv: 0,
            df: -4,
            dc: 5,
        };
        let out = both.start_transfer(&h2, units, 1, g(2)).unwrap();
        let mut fresh = Counter::plain(0);
        send(&both, HOME, &mut fresh, &h2, &out).unwrap();
        let bounds = |c: &Counter| (c.floor().map(|f| f.floor), c.ceiling().map(|x| x.ceiling));
        assert_eq!(bounds(&both), (Some(4), Some(15)));
        assert_eq!(bounds(&fresh), (Some(-4), Some(5)));
    }

    /// A refused move of up-budget comes back to its giver; a move of nothing bounds a ceiled
    /// holder from above at 0, as its name did.
    #[test]
    fn a_refused_ceiling_move_rolls_back_and_an_empty_one_ceils_its_receiver() {
        let h1 = ceiled_holder(1);
        let mut home = Counter::plain(0);
        home.set_ceiling(Some(9)).unwrap();
        let out = home
            .start_transfer(&h1, Units::ceiling(6), 1, g(1))
            .unwrap();
        let refusal = Ack {
            giver: HOME.to_vec(),
            receiver: h1.clone(),
            seq: out.seq,
            refused: true,
        };
        assert_eq!(home.apply_answer(&refusal), Ok(AckEffect::RolledBack));
        assert_eq!(home.ceiling().map(|c| c.ceiling), Some(9));
        let out = home.start_transfer(&h1, Units::default(), 2, g(1)).unwrap();
        let mut fresh = Counter::plain(-2);
        send(&home, HOME, &mut fresh, &h1, &out).unwrap();
        assert_eq!(fresh.ceiling().map(|c| c.ceiling), Some(0));
        assert_eq!(fresh.floor(), None);
    }

    /// A fold carries a ceiled holder's value, floor and ceiling home in one credit; its
    /// ceiling is in hand (as its value) until the fold is acknowledged.
    #[test]
    fn a_fold_carries_the_ceiling_home_and_keeps_it_in_hand_until_acknowledged() {
        let h1 = ceiled_holder(1);
        let mut home = Counter::plain(5);
        home.set_ceiling(Some(30)).unwrap();
        home.begin_fold(std::slice::from_ref(&h1), &mut fold_ids())
            .unwrap();
        let fold = home.leaving()[0].fold_id;
        let mut holder = Counter::plain(3);
        holder.place_ceiling(Some(8)).unwrap();
        assert_eq!(holder.ceiling_in_hand(), Some(8));
        let out = holder.seal_into(HOME, fold, 2, g(3)).unwrap().unwrap();
        assert_eq!((out.dv, out.df, out.dc), (3, 0, 8));
        assert_eq!(holder.ceiling().map(|c| c.ceiling), Some(0));
        assert_eq!(holder.ceiling_in_hand(), Some(8), "the fold is in hand");
        send(&holder, &h1, &mut home, HOME, &out).unwrap();
        assert_eq!(
            (home.value(), home.ceiling().map(|c| c.ceiling)),
            (8, Some(38))
        );
        assert!(holder.apply_ack(HOME, out.seq));
        assert_eq!(holder.ceiling_in_hand(), Some(0), "the home has it");
    }

    /// Before its first credit a ceiled holder is held at 0 from above by its name: a positive
    /// add past it is refused, and the refusal waits (its share travels); a missing one too.
    #[test]
    fn a_ceiled_holder_waits_for_its_first_credit_to_take_adds() {
        let h1 = ceiled_holder(1);
        let by_name = crate::counter::spread::bounds_by_name(&h1);
        assert_eq!((by_name.floor, by_name.ceiling), (None, Some(0)));
        assert!(add_waits_for_up_budget(None, 1, by_name.ceiling, 1));
        assert!(!add_waits_for_up_budget(None, -1, by_name.ceiling, 1));
        assert!(
            !add_waits_for_up_budget(None, 1, None, 1),
            "not a ceiled name"
        );
        let mut c = Counter::plain(-2);
        assert!(add_waits_for_up_budget(Some(&c), 3, by_name.ceiling, 1));
        assert!(
            !add_waits_for_up_budget(Some(&c), 2, by_name.ceiling, 1),
            "fits under 0"
        );
        let op = |delta| crate::counter::AddOp {
            now: 1,
            event: 1,
            delta,
            shard: 0,
            shards: 1,
            token: None,
        };
        assert_eq!(c.apply_add_under(&op(3), by_name), Ok(None));
        assert_eq!(c.apply_add_under(&op(2), by_name), Ok(Some(0)));
        c.place_ceiling(Some(5)).unwrap();
        assert!(
            !add_waits_for_up_budget(Some(&c), 6, by_name.ceiling, 1),
            "refused for good"
        );
        assert!(add_refused_by_ceiling(&c, 6, by_name.ceiling));
        assert_eq!(c.apply_add_under(&op(5), by_name), Ok(Some(5)));
    }

    /// Every step of a fold, with the gather's rule (count the holder's units in hand while
    /// the home lists it as leaving): the total stays exact.
    #[test]
    fn fold_accounting_is_exact_at_every_step() {
        let h1 = holder(1);
        let mut home = Counter::plain(100);
        let mut holder = Counter::from_shards(vec![3, 4]).unwrap();
        let total = |home: &Counter, holder: &Counter| {
            let counted = home.leaving().iter().any(|l| l.name == h1);
            home.value()
                + if counted {
                    holder.units_in_hand().unwrap()
                } else {
                    0
                }
        };
        home.begin_fold(std::slice::from_ref(&h1), &mut fold_ids())
            .unwrap();
        let fold = home.leaving()[0].fold_id;
        assert_eq!(total(&home, &holder), 107, "listed as leaving");
        assert!(home.transfers().unwrap().knows_name(&h1));
        let out = holder.seal_into(HOME, fold, 5, g(3)).unwrap().unwrap();
        assert_eq!((holder.value(), out.dv, out.fold_id), (0, 7, fold));
        assert!(holder.is_sealed());
        assert_eq!(total(&home, &holder), 107, "sealed, credit in flight");
        assert_eq!(
            holder.seal_into(HOME, fold, 6, g(3)),
            Ok(None),
            "sealing twice"
        );
        assert_eq!(
            holder.seal_into(b"other", fold + 1, 6, g(3)),
            Err(TransferError::Sealed),
            "sealed for another fold"
        );
        assert_eq!(
            holder.start_transfer(b"x", Units::value_and_floor(0, 0), 6, g(3)),
            Err(TransferError::Sealed)
        );
        send(&holder, &h1, &mut home, HOME, &out).unwrap();
        assert!(home.leaving().is_empty());
        assert_eq!(total(&home, &holder), 107, "credited, not acknowledged");
        assert!(holder.apply_ack(HOME, out.seq));
        assert_eq!(total(&home, &holder), 107, "acknowledged");
        assert!(home.transfers().unwrap().knows_name(&h1), "never reused");
        assert!(holder.is_sealed(), "stays sealed until it expires");
    }

    /// Item 3 of issue 23: a home spread and shrunk back to 1 again and again. Before, every
    /// folded holder left an inbox entry for ever, and past MAX_ENTRIES credits were refused
    /// ("too many givers"): folds stalled. Now a spread whose folds all landed is retired: its
    /// givers' entries go, a late copy of any of its credits is a repeat (acknowledged, never
    /// applied twice, never refused), and its id is not drawn again.
    #[test]
    fn spreads_shrunk_to_one_are_retired_and_the_inbox_stays_small() {
        let mut home = Counter::plain(0);
        let mut late: Vec<(Credit, Counter)> = Vec::new();
        let holders_per_spread = 40;
        let cycles = MAX_ENTRIES / holders_per_spread + 10;
        for cycle in 0..cycles {
            let id = 2 * (cycle as u64 + 1);
            let names = crate::counter::spread::plan_holders(
                HOME,
                id,
                &[],
                holders_per_spread + 1,
                &crate::counter::spread::Standalone,
            )
            .unwrap();
            home.set_spread(crate::counter::Spread {
                id,
                holders: names.clone(),
                floor: None,
                ceiling: None,
            })
            .unwrap();
            home.begin_shrink(1, &mut fold_ids()).unwrap();
            for (i, name) in names.iter().enumerate() {
                let fold = home
                    .leaving()
                    .iter()
                    .find(|l| &l.name == name)
                    .unwrap()
                    .fold_id;
                let mut h = Counter::plain(1);
                let giver = Giver {
                    name,
                    new_id: id * 1000 + i as u64 + 2,
                };
                let out = h.seal_into(HOME, fold, 5, giver).unwrap().unwrap();
                let c = credit(name, HOME, giver.new_id, &out);
                assert_eq!(
                    home.apply_credit(&c),
                    Ok(CreditOutcome::Applied),
                    "cycle {cycle}"
                );
                if i == 0 && (cycle % 500 == 0 || cycle == cycles - 3) {
                    late.push((c, h));
                }
            }
            assert!(home.leaving().is_empty());
            let t = home.transfers().unwrap();
            assert!(
                t.inbox.is_empty(),
                "cycle {cycle}: {} entries",
                t.inbox.len()
            );
            assert!(t.retired.len() <= MAX_RETIRED);
            assert!(home.has_retired(id));
        }
        assert_eq!(home.value(), (cycles * holders_per_spread) as i64);
        let bytes = home.transfers().unwrap().heap_bytes();
        assert!(bytes <= MAX_RETIRED * 8, "{bytes} bytes");
        // A spread id retired lately is refused to a new spread.
        let id = 2 * cycles as u64;
        let again = crate::counter::Spread {
            id,
            holders: vec![holder_name(HOME, id, 1, 0)],
            floor: None,
            ceiling: None,
        };
        assert!(home.set_spread(again).is_err());
        // A late copy of a fold credit of a spread still retired is a repeat: the giver hears
        // an acknowledgement and forgets it; nothing is applied twice.
        let value = home.value();
        let (c, mut h) = late.pop().unwrap();
        assert_eq!(home.credit_outcome(&c), Some(CreditOutcome::Repeat));
        assert_eq!(home.apply_credit(&c), Ok(CreditOutcome::Repeat));
        assert_eq!(home.value(), value);
        let ack = Ack {
            giver: c.giver.clone(),
            receiver: c.receiver.clone(),
            seq: c.seq,
            refused: false,
        };
        assert_eq!(
            h.apply_answer(&ack),
            Ok(AckEffect::Acknowledged {
                sealed_and_done: true
            })
        );
        // One of a spread retired so long ago that its id was dropped is refused, also
        // harmless: a fold is kept by its giver (never applied: its fold is not leaving).
        let (c, _) = late.remove(0);
        assert_eq!(home.credit_outcome(&c), Some(CreditOutcome::Refused));
        assert_eq!(home.apply_credit(&c), Ok(CreditOutcome::Refused));
        assert_eq!(home.value(), value);
    }

    /// A spread keeps its inbox entries while it is the home's, or while one of its holders is
    /// still leaving: the entries are what makes a late budget move a repeat, and their names
    /// are what a grow must not take again.
    #[test]
    fn a_spread_is_retired_only_once_it_is_gone_and_every_fold_landed() {
        let (h1, h2) = (holder(1), holder(2));
        let mut home = Counter::plain(0);
        home.set_spread(crate::counter::Spread {
            id: 7,
            holders: vec![h1.clone(), h2.clone()],
            floor: None,
            ceiling: None,
        })
        .unwrap();
        home.begin_shrink(2, &mut fold_ids()).unwrap();
        let fold = |home: &Counter, name: &[u8]| {
            home.leaving()
                .iter()
                .find(|l| l.name == name)
                .unwrap()
                .fold_id
        };
        let mut holder2 = Counter::plain(3);
        let out = holder2
            .seal_into(HOME, fold(&home, &h2), 5, g(22))
            .unwrap()
            .unwrap();
        send(&holder2, &h2, &mut home, HOME, &out).unwrap();
        assert!(!home.has_retired(7), "still the home's spread");
        assert!(home.transfers().unwrap().knows_name(&h2));
        home.begin_shrink(1, &mut fold_ids()).unwrap();
        home.set_spread(crate::counter::Spread {
            id: 12,
            holders: vec![holder_name(HOME, 12, 1, 0)],
            floor: None,
            ceiling: None,
        })
        .unwrap();
        assert!(!home.has_retired(7), "h1 is still leaving");
        let mut holder1 = Counter::plain(4);
        let out = holder1
            .seal_into(HOME, fold(&home, &h1), 6, g(11))
            .unwrap()
            .unwrap();
        send(&holder1, &h1, &mut home, HOME, &out).unwrap();
        assert!(home.has_retired(7));
        assert!(!home.has_retired(12));
        let t = home.transfers().unwrap();
        assert!(t.inbox.is_empty());
        assert!(
            t.knows_name(&h1) && t.knows_name(&h2),
            "names of a retired spread"
        );
        assert_eq!(home.value(), 7);
    }

    /// Finding 1 of the spread issue: a budget move from a holder into its home, in flight when
    /// a shrink makes that holder leave, neither ends the fold nor is lost; the holder seals
    /// once the move is acknowledged and its fold then completes.
    #[test]
    fn a_budget_move_into_the_home_does_not_end_a_fold() {
        let h1 = holder(1);
        let mut home = Counter::plain(10);
        home.set_spread(crate::counter::Spread::of(vec![h1.clone()]))
            .unwrap();
        home.set_floor(Some(0)).unwrap();
        let mut h = Counter::plain(5);
        h.set_floor(Some(0)).unwrap();
        let mv = h
            .start_transfer(HOME, Units::value_and_floor(0, -2), 1, g(3))
            .unwrap();
        home.begin_shrink(1, &mut fold_ids()).unwrap();
        let fold = home.leaving()[0].fold_id;
        assert_eq!(
            h.seal_into(HOME, fold, 2, g(3)),
            Err(TransferError::Busy),
            "move pending"
        );
        assert_eq!(
            send(&h, &h1, &mut home, HOME, &mv),
            Ok(CreditOutcome::Applied)
        );
        assert_eq!(home.leaving().len(), 1, "a move does not end the fold");
        assert!(h.apply_ack(HOME, mv.seq));
        let out = h.seal_into(HOME, fold, 3, g(3)).unwrap().unwrap();
        assert_eq!(
            send(&h, &h1, &mut home, HOME, &out),
            Ok(CreditOutcome::Applied)
        );
        assert!(home.leaving().is_empty());
        assert_eq!(home.value(), 15);
        assert_eq!(
            home.floor().unwrap().floor,
            0,
            "floors summed home: 0 + 2 - 2"
        );
    }

    /// A home renamed in the middle of a fold: the old name refuses the credit (nothing there
    /// lists the fold); the seal request from the new name re-targets the same credit.
    #[test]
    fn a_fold_follows_its_renamed_home() {
        let h1 = holder(1);
        let mut home = Counter::plain(1);
        home.begin_fold(std::slice::from_ref(&h1), &mut fold_ids())
            .unwrap();
        let fold = home.leaving()[0].fold_id;
        let mut h = Counter::plain(4);
        let out = h.seal_into(HOME, fold, 1, g(3)).unwrap().unwrap();
        let mut gone = Counter::plain(0);
        assert_eq!(
            send(&h, &h1, &mut gone, HOME, &out),
            Ok(CreditOutcome::Refused)
        );
        assert_eq!(h.apply_refusal(HOME, out.seq), Ok(false), "a fold is kept");
        let moved = h.seal_into(b"renamed", fold, 2, g(3)).unwrap().unwrap();
        assert_eq!(
            (moved.seq, moved.dv, &moved.receiver[..]),
            (out.seq, 4, &b"renamed"[..])
        );
        assert_eq!(
            send(&h, &h1, &mut home, b"renamed", &moved),
            Ok(CreditOutcome::Applied)
        );
        assert_eq!((home.value(), home.leaving().len()), (5, 0));
    }

    /// A sibling's move (sent by a node from before budget moved only through the home) is
    /// refused by a holder whatever it is: fresh (a key its home has not credited yet, or one
    /// folded and expired), or floored by its home's first move. Its giver rolls it back; it
    /// is never held "not yet", where a receiver gone for good would hold it for ever.
    #[test]
    fn a_holder_refuses_a_siblings_move_whatever_it_is() {
        let (h1, h2) = (holder(1), holder(2));
        let mut giver = Counter::plain(5);
        giver.set_floor(Some(0)).unwrap();
        let out = giver
            .start_transfer(&h2, Units::value_and_floor(0, -3), 1, g(4))
            .unwrap();
        let mut fresh = Counter::plain(0);
        assert_eq!(
            send(&giver, &h1, &mut fresh, &h2, &out),
            Ok(CreditOutcome::Refused)
        );
        assert_eq!(fresh, Counter::plain(0));
        let first = Counter::plain(9)
            .start_transfer(&h2, Units::value_and_floor(0, 0), 1, g(5))
            .unwrap();
        send(&Counter::plain(0), HOME, &mut fresh, &h2, &first).unwrap();
        assert!(fresh.floor().is_some(), "floored by its home");
        assert_eq!(
            send(&giver, &h1, &mut fresh, &h2, &out),
            Ok(CreditOutcome::Refused),
            "the same answer to every copy"
        );
        assert_eq!(giver.floor().map(|f| f.floor), Some(3), "debited");
        assert_eq!(giver.apply_refusal(&h2, out.seq), Ok(true));
        assert_eq!(giver.floor().map(|f| f.floor), Some(0), "rolled back");
        assert!(giver.transfers().is_none_or(|t| t.outbox.is_empty()));
    }

    /// A home sends no seal request to a leaving holder while its own move toward that holder
    /// is unanswered.
    #[test]
    fn a_home_asks_no_seal_while_it_moves_budget_to_the_holder() {
        let h1 = holder(1);
        let mut home = Counter::plain(10);
        home.set_floor(Some(0)).unwrap();
        home.set_spread(crate::counter::Spread::of(vec![h1.clone()]))
            .unwrap();
        let mv = home
            .start_transfer(&h1, Units::value_and_floor(0, -4), 1, g(3))
            .unwrap();
        home.begin_shrink(1, &mut fold_ids()).unwrap();
        let (seals, credits) = home.messages_due(HOME);
        assert!(seals.is_empty() && credits.len() == 1);
        assert!(home.apply_ack(&h1, mv.seq));
        assert_eq!(home.messages_due(HOME).0.len(), 1);
    }

    /// Every copy of a credit gets one answer: it is judged by the giver's name at the debit,
    /// not by the name it was sent from (a home renamed since), and a home that is not there
    /// (renamed away) answers "not yet", never a refusal that would roll the move back while
    /// the renamed home applies it.
    #[test]
    fn a_credit_is_judged_by_its_debit_not_by_its_senders_name_now() {
        let h1 = holder(1);
        let mut home = Counter::plain(10);
        home.set_floor(Some(0)).unwrap();
        home.set_spread(crate::counter::Spread::of(vec![h1.clone()]))
            .unwrap();
        let mv = home
            .start_transfer(
                &h1,
                Units::value_and_floor(0, -4),
                1,
                Giver {
                    name: b"renamed-home",
                    new_id: 3,
                },
            )
            .unwrap();
        assert_eq!(
            mv.from,
            HOME.to_vec(),
            "signed with the home name its holders carry"
        );
        let (_, credits) = home.messages_due(b"renamed-home");
        let credit = &credits[0];
        assert_eq!(
            (&credit.giver[..], &credit.from[..]),
            (&b"renamed-home"[..], HOME)
        );
        let mut h = Counter::plain(0);
        assert_eq!(h.apply_credit(credit), Ok(CreditOutcome::Applied));
        let to_home = Credit {
            receiver: HOME.to_vec(),
            ..credit.clone()
        };
        assert_eq!(
            Counter::credit_outcome_at(None, &to_home),
            Some(CreditOutcome::NotYet),
            "a home that is not here"
        );
        assert_eq!(
            Counter::credit_outcome_at(None, credit),
            None,
            "a missing holder is a fresh one"
        );
    }

    /// On `RESTORE`, a key keeps only the outbox entries debited under its own name (or, on a
    /// holder name, under a holder name of its spread); the debits stay.
    #[test]
    fn a_restored_key_keeps_only_what_it_debited_under_its_name() {
        let (h1, h2) = (holder(1), holder(2));
        let mut home = Counter::plain(10);
        home.set_floor(Some(0)).unwrap();
        home.set_spread(crate::counter::Spread::of(vec![h1.clone(), h2.clone()]))
            .unwrap();
        let signed = |name: &'static [u8]| Giver { name, new_id: 3 };
        home.start_transfer(&h1, Units::value_and_floor(0, -4), 1, signed(HOME))
            .unwrap();
        let mut copy = home.clone();
        assert_eq!(
            copy.drop_foreign_transfers(HOME),
            0,
            "MIGRATE: the same name"
        );
        assert_eq!(copy, home);
        assert_eq!(copy.drop_foreign_transfers(b"atk:copy"), 1);
        assert!(copy.transfers().is_none_or(|t| t.outbox.is_empty()));
        assert_eq!(
            copy.floor(),
            home.floor(),
            "the debit stays: a leak, never a mint"
        );
        assert!(copy.messages_due(b"atk:copy").1.is_empty());

        let mut sealed = Counter::plain(20);
        sealed
            .seal_into(
                HOME,
                101,
                1,
                Giver {
                    name: &h1,
                    new_id: 5,
                },
            )
            .unwrap();
        let renamed = holder_name(HOME, 7, 9, 0);
        let other_home = holder_name(b"atk:k", 7, 1, 0);
        let other_spread = holder_name(HOME, 8, 1, 0);
        let cases = [
            (&h1, 1),
            (&renamed, 1),
            (&other_home, 0),
            (&other_spread, 0),
        ];
        for (name, kept) in cases.into_iter().chain([(&b"k2".to_vec(), 0)]) {
            let mut c = sealed.clone();
            c.drop_foreign_transfers(name);
            let left = c.transfers().map_or(0, |t| t.outbox.len());
            assert_eq!(left, kept, "{}", String::from_utf8_lossy(name));
        }
    }

    /// A holder asked to seal by its home under a new name first sends its own move toward
    /// the home's former name there, same seq.
    #[test]
    fn a_move_toward_a_former_home_name_follows_the_seal_request() {
        let mut h = Counter::plain(5);
        h.set_floor(Some(0)).unwrap();
        let mv = h
            .start_transfer(HOME, Units::value_and_floor(0, -2), 1, g(3))
            .unwrap();
        assert!(!h.has_move_to_former_home(HOME));
        assert!(h.has_move_to_former_home(b"home2"));
        assert!(h.retarget_moves_to(b"home2"));
        let moved = h
            .transfers()
            .unwrap()
            .outgoing_to(b"home2")
            .cloned()
            .unwrap();
        assert_eq!((moved.seq, moved.df), (mv.seq, mv.df));
        assert!(h.transfers().unwrap().outgoing_to(HOME).is_none());
        assert!(!h.retarget_moves_to(b"home2"), "once");
        h.start_transfer(&holder(2), Units::value_and_floor(0, -1), 2, g(3))
            .unwrap();
        assert!(h.retarget_moves_to(b"home3"), "renamed again");
        let t = h.transfers().unwrap();
        assert!(t.outgoing_to(b"home3").is_some() && t.outgoing_to(b"home2").is_none());
        assert!(
            t.outgoing_to(&holder(2)).is_some(),
            "a move to a sibling stays"
        );
    }

    #[test]
    fn a_sealed_holder_refuses_budget_moves() {
        let (h1, h2) = (holder(1), holder(2));
        let mut sealed = Counter::plain(0);
        sealed.seal_into(HOME, 77, 1, g(3)).unwrap();
        let mut giver = Counter::plain(5);
        giver.set_floor(Some(0)).unwrap();
        let out = giver
            .start_transfer(&h2, Units::value_and_floor(0, -5), 1, g(4))
            .unwrap();
        assert_eq!(
            send(&giver, &h1, &mut sealed, &h2, &out),
            Ok(CreditOutcome::Refused)
        );
        assert_eq!(giver.apply_refusal(&h2, out.seq), Ok(true));
        assert_eq!(
            giver.floor().unwrap().budgets,
            vec![5],
            "the budget came back"
        );
    }

    #[test]
    fn validation_refuses_forged_states() {
        let out = |r: &[u8], seq, fold_id| Outgoing {
            receiver: r.to_vec(),
            seq,
            dv: 1,
            df: 0,
            dc: 0,
            fold_id,
            from: Vec::new(),
        };
        let applied = |giver_id, name: &[u8], seq| Applied {
            giver_id,
            name: name.to_vec(),
            seq,
        };
        let leaving = |name: &[u8], fold_id| Leaving {
            name: name.to_vec(),
            fold_id,
        };
        let ok = Transfers {
            giver_id: 3,
            last_seq: 9,
            outbox: vec![out(b"a", 3, 0), out(b"b", 9, 0)],
            inbox: vec![
                applied(0, b"x", 1),
                applied(0, b"y", 2),
                applied(5, b"x", 2),
            ],
            sealed_into: None,
            leaving: vec![
                leaving(b"{ctr.1.0}k", 40),
                leaving(b"{ctr.2.0}k", LEGACY_FOLD),
            ],
            retired: vec![9, 4],
            folded: Vec::new(),
            listing: None,
        };
        ok.validate().unwrap();
        let sealed = Transfers {
            outbox: vec![out(b"home", 3, 40)],
            sealed_into: Some(b"home".to_vec()),
            ..ok.clone()
        };
        sealed.validate().unwrap();
        let broken = [
            Transfers {
                outbox: vec![out(b"b", 3, 0), out(b"a", 4, 0)],
                ..ok.clone()
            },
            Transfers {
                outbox: vec![out(b"a", 10, 0)],
                ..ok.clone()
            },
            Transfers {
                outbox: vec![out(b"a", 3, 40)],
                ..ok.clone()
            },
            Transfers {
                outbox: vec![out(b"x", 3, 40)],
                ..sealed.clone()
            },
            Transfers {
                inbox: vec![applied(0, b"x", 0)],
                ..ok.clone()
            },
            Transfers {
                inbox: vec![applied(0, b"y", 1), applied(0, b"x", 1)],
                ..ok.clone()
            },
            Transfers {
                inbox: vec![applied(5, b"x", 1), applied(5, b"y", 1)],
                ..ok.clone()
            },
            Transfers {
                leaving: vec![leaving(b"{ctr.1.0}k", 4), leaving(b"{ctr.1.0}k", 5)],
                ..ok.clone()
            },
            Transfers {
                leaving: vec![leaving(b"{ctr.1.0}k", 4), leaving(b"{ctr.2.0}k", 4)],
                ..ok.clone()
            },
            Transfers {
                leaving: vec![leaving(b"{ctr.1.0}k", 0)],
                ..ok.clone()
            },
            Transfers {
                sealed_into: Some(Vec::new()),
                ..ok.clone()
            },
            Transfers {
                leaving: vec![leaving(&[b'n'; MAX_NAME + 1], 4)],
                ..ok.clone()
            },
            Transfers {
                leaving: vec![leaving(b"bank", 40)],
                ..ok.clone()
            },
            Transfers {
                retired: vec![4, 9, 4],
                ..ok.clone()
            },
            Transfers {
                retired: vec![0],
                ..ok.clone()
            },
            Transfers {
                retired: (1..=MAX_RETIRED as u64 + 1).collect(),
                ..ok.clone()
            },
            Transfers {
                leaving: vec![leaving(&holder_name(b"k", 9, 1, 0), 40)],
                ..ok.clone()
            },
        ];
        for t in broken {
            assert!(t.validate().is_err(), "{t:?}");
        }
    }
}
