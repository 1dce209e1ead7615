//! Transfers between counters, the pure part: moving a pair (dv value units, df floor units)
//! from a *giver* key to a *receiver* key, possibly on another master, with no unit lost or
//! counted twice. The glue (`crate::commands::spread_transfer`) drives it; folds of spread
//! counters (shrinking) are built on it, and so are budget moves between holders.
//!
//! A transfer is two ordinary replicated writes sharing one id (giver name, seq):
//! 1. [`Counter::start_transfer`] on the giver's master: value -= dv, floor -= df, and an
//!    [`Outgoing`] entry in the giver's outbox (at most one per receiver, so a receiver sees
//!    one giver's seqs in increasing order).
//! 2. [`Counter::apply_credit`] on the receiver's master: value += dv, floor += df, iff seq is
//!    above the highest seq already applied from that giver (the *inbox*, one entry per giver,
//!    kept for ever: exact, O(givers)); a repeat changes nothing but is acknowledged again.
//! 3. [`Counter::apply_ack`] on the giver's master: the outbox entry goes. Until then the
//!    giver resends the credit.
//!
//! A gather counts value units in flight at the giver ([`Counter::units_in_hand`]) until the
//! ack. That is exact for folds (the home counts a leaving holder only until its credit); a
//! transfer of value units (dv != 0) between two holders of one total would count them twice
//! between credit and ack, so other transfers move floor units only (dv = 0).
//!
//! Seqs are `max(last + 1, now_ms * 1024)`: they grow across a giver's lives, so a giver key
//! deleted and made again still sends seqs above what its receivers already applied.
//!
//! A *fold* moves a whole spread holder back to its home: the home lists the holder in
//! `leaving` ([`Counter::begin_fold`]); the holder's master *seals* it
//! ([`Counter::seal_into`]: a transfer of everything it holds to the home, after which it
//! refuses writes); the home's credit removes it from `leaving` in the same write. A gather
//! counts a leaving holder's [`Counter::units_in_hand`] (its value plus what it has sent and not
//! had acknowledged) only while the home, when it sums, still lists it as leaving: before the
//! credit the units are at the holder (counted there), after it they are in the home's value.

use super::{exact_sum, Counter, CounterError};
use crate::counter::spread::{MAX_HOLDERS, MAX_HOLDER_NAME};

/// Longest key name a transfer may name (a giver or a receiver).
pub const MAX_NAME: usize = MAX_HOLDER_NAME;
/// Most outbox entries, inbox entries, or leaving holders one counter keeps.
pub const MAX_ENTRIES: usize = 1 << 16;

/// A transfer sent and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub receiver: Vec<u8>,
    pub seq: u64,
    pub dv: i64,
    pub df: i64,
}

/// What a counter keeps about transfers (the encoded TRANSFER section).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transfers {
    /// The last seq this counter gave out (0: none yet).
    pub last_seq: u64,
    /// Sent and not acknowledged, by receiver name (strictly increasing, unique).
    pub outbox: Vec<Outgoing>,
    /// Highest seq applied per giver name (strictly increasing names).
    pub inbox: Vec<(Vec<u8>, u64)>,
    /// When this holder was folded: the home it was folded into. It refuses writes.
    pub sealed_into: Option<Vec<u8>>,
    /// Home only: holders being folded back (sealed or about to be), not yet credited.
    pub leaving: Vec<Vec<u8>>,
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

    /// The highest seq applied from `giver` (0: none).
    pub fn applied_from(&self, giver: &[u8]) -> u64 {
        self.inbox
            .binary_search_by(|(g, _)| g.as_slice().cmp(giver))
            .map_or(0, |i| self.inbox[i].1)
    }

    /// True when `name` was ever folded into (or is folding into) this counter: a name a new
    /// holder must not take (the old key may still be sealed).
    pub fn knows_name(&self, name: &[u8]) -> bool {
        self.applied_from(name) > 0 || self.leaving.iter().any(|l| l == name)
    }

    /// Checks what a decoder may carry: bounded, ordered, unique names; seqs given out.
    pub fn validate(&self) -> Result<(), CounterError> {
        let bad = |why| Err(CounterError::InvalidOperation(why));
        let name_ok = |n: &[u8]| !n.is_empty() && n.len() <= MAX_NAME;
        if self.outbox.len() > MAX_ENTRIES
            || self.inbox.len() > MAX_ENTRIES
            || self.leaving.len() > MAX_HOLDERS
        {
            return bad("too many transfer entries");
        }
        if !self.outbox.iter().all(|o| name_ok(&o.receiver))
            || !self.inbox.iter().all(|(g, _)| name_ok(g))
            || !self.leaving.iter().all(|l| name_ok(l))
            || !self.sealed_into.as_deref().is_none_or(name_ok)
        {
            return bad("transfer name length");
        }
        if self
            .outbox
            .windows(2)
            .any(|w| w[0].receiver >= w[1].receiver)
            || self.inbox.windows(2).any(|w| w[0].0 >= w[1].0)
        {
            return bad("transfer entries repeated or out of order");
        }
        let mut leaving = self.leaving.clone();
        leaving.sort_unstable();
        if leaving.windows(2).any(|w| w[0] == w[1]) {
            return bad("a holder leaves twice");
        }
        if self
            .outbox
            .iter()
            .any(|o| o.seq == 0 || o.seq > self.last_seq)
            || self.inbox.iter().any(|(_, s)| *s == 0)
        {
            return bad("transfer seq out of range");
        }
        Ok(())
    }

    pub fn heap_bytes(&self) -> usize {
        self.outbox
            .iter()
            .map(|o| o.receiver.capacity())
            .chain(self.inbox.iter().map(|(g, _)| g.capacity()))
            .chain(self.leaving.iter().map(Vec::capacity))
            .chain(self.sealed_into.iter().map(Vec::capacity))
            .sum::<usize>()
            + self.outbox.capacity() * std::mem::size_of::<Outgoing>()
            + self.inbox.capacity() * std::mem::size_of::<(Vec<u8>, u64)>()
            + self.leaving.capacity() * std::mem::size_of::<Vec<u8>>()
    }
}

/// The seq after `last` at time `now_ms` (see the module docs).
pub fn next_seq(last: u64, now_ms: i64) -> u64 {
    let by_time = u64::try_from(now_ms).unwrap_or(0).saturating_mul(1024);
    last.saturating_add(1).max(by_time)
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

    /// Drops every transfer state (what a copy of the counter under another name starts from).
    pub fn forget_transfers(&mut self) {
        if let Some(e) = &mut self.ext {
            e.transfers = None;
        }
        self.trim_ext();
    }

    /// True when the counter was folded into its home and refuses writes.
    pub fn is_sealed(&self) -> bool {
        self.transfers().is_some_and(|t| t.sealed_into.is_some())
    }

    /// What a gather counts for this counter as a holder: its value plus the value units it
    /// has sent and not had acknowledged. None on overflow.
    pub fn units_in_hand(&self) -> Option<i64> {
        match self.transfers() {
            None => Some(self.value),
            Some(t) => exact_sum(std::iter::once(self.value).chain(t.outbox.iter().map(|o| o.dv))),
        }
    }

    /// Moves the value by `dv` and the floor by `df` (the headroom by dv - df, spread evenly
    /// over the budgets again). Floor units moved to or from a counter without a floor treat
    /// it as floor 0, as `CTR.DECRFLOOR` does: a fresh holder of a floored spread counter can
    /// receive budget. Checked before anything changes.
    fn shift(&mut self, dv: i64, df: i64, make_floored: bool) -> Result<(), CounterError> {
        let value = self.value.checked_add(dv).ok_or(CounterError::Overflow)?;
        let floor = match self.floor() {
            None if df == 0 && !make_floored => None,
            None => Some(df),
            Some(f) => Some(f.floor.checked_add(df).ok_or(CounterError::Overflow)?),
        };
        if floor.is_some_and(|f| value < f) {
            return Err(CounterError::BelowFloor);
        }
        if let Some(f) = floor {
            value.checked_sub(f).ok_or(CounterError::Overflow)?;
        }
        if let Some(first) = self.shards.first_mut() {
            *first = first.checked_add(dv).ok_or(CounterError::Overflow)?;
        }
        self.value = value;
        if floor.is_some() {
            // Re-spreads the headroom over the budgets (checked above: cannot fail).
            self.set_floor(floor)?;
        }
        Ok(())
    }

    /// Step 1 on the giver: debits (dv, df) and records the outbox entry to `receiver`.
    /// Refused when a transfer to that receiver is unacknowledged, or the debit is not possible.
    pub fn start_transfer(
        &mut self,
        receiver: &[u8],
        dv: i64,
        df: i64,
        now_ms: i64,
    ) -> Result<Outgoing, TransferError> {
        if receiver.is_empty() || receiver.len() > MAX_NAME {
            return Err(CounterError::InvalidOperation("transfer receiver name length").into());
        }
        if self.is_sealed() {
            return Err(TransferError::Sealed);
        }
        let t = self.transfers().cloned().unwrap_or_default();
        let slot = match t
            .outbox
            .binary_search_by(|o| o.receiver.as_slice().cmp(receiver))
        {
            Ok(_) => return Err(TransferError::Busy),
            Err(slot) => slot,
        };
        if t.outbox.len() >= MAX_ENTRIES {
            return Err(CounterError::InvalidOperation("too many transfers in flight").into());
        }
        let debit_v = dv.checked_neg().ok_or(CounterError::Overflow)?;
        let debit_f = df.checked_neg().ok_or(CounterError::Overflow)?;
        self.shift(debit_v, debit_f, false)?;
        let entry = Outgoing {
            receiver: receiver.to_vec(),
            seq: next_seq(t.last_seq, now_ms),
            dv,
            df,
        };
        let t = self.transfers_mut();
        t.last_seq = entry.seq;
        t.outbox.insert(slot, entry.clone());
        Ok(entry)
    }

    /// Step 2 on the receiver: applies a credit from `giver` unless its seq was applied
    /// already. Ok(true) when applied, Ok(false) for a repeat (acknowledge it again). A credit
    /// from a leaving holder ends its fold in the same write.
    pub fn apply_credit(
        &mut self,
        giver: &[u8],
        seq: u64,
        dv: i64,
        df: i64,
    ) -> Result<bool, TransferError> {
        if giver.is_empty() || giver.len() > MAX_NAME || seq == 0 {
            return Err(CounterError::InvalidOperation("transfer credit out of range").into());
        }
        let t = self.transfers().cloned().unwrap_or_default();
        if seq <= t.applied_from(giver) {
            return Ok(false);
        }
        let known = t.inbox.binary_search_by(|(g, _)| g.as_slice().cmp(giver));
        if known.is_err() && t.inbox.len() >= MAX_ENTRIES {
            return Err(CounterError::InvalidOperation("too many givers").into());
        }
        // A transfer that is not a fold (the giver is not leaving this home; no value moves) is
        // a budget move of a floored spread counter: its receiver is a holder of that counter
        // and must never go below its floor, whatever it is sent, also when the move carries
        // no units (a holder given a share of 0), so its first credit makes it floored (at 0
        // when it had no floor).
        let budget_move = dv == 0 && !t.leaving.iter().any(|l| l == giver);
        self.shift(dv, df, budget_move)?;
        let t = self.transfers_mut();
        match known {
            Ok(i) => t.inbox[i].1 = seq,
            Err(i) => t.inbox.insert(i, (giver.to_vec(), seq)),
        }
        t.leaving.retain(|l| l != giver);
        Ok(true)
    }

    /// Step 3 on the giver: forgets the outbox entry to `receiver` when it is the one of
    /// `seq`. True when something was removed.
    pub fn apply_ack(&mut self, receiver: &[u8], seq: u64) -> bool {
        let Some(t) = self.ext.as_mut().and_then(|e| e.transfers.as_deref_mut()) else {
            return false;
        };
        let before = t.outbox.len();
        t.outbox
            .retain(|o| !(o.receiver == receiver && o.seq == seq));
        let removed = t.outbox.len() < before;
        self.trim_transfers();
        removed
    }

    /// On the home: lists `holders` as leaving (they must already be out of its holder list).
    pub fn begin_fold(&mut self, holders: &[Vec<u8>]) -> Result<(), CounterError> {
        let t = self.transfers_mut();
        for h in holders {
            if !t.leaving.contains(h) {
                t.leaving.push(h.clone());
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
    pub fn begin_shrink(&mut self, holders: usize) -> Result<Vec<Vec<u8>>, CounterError> {
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
                floor: spread.floor,
            })
        });
        if let Err(e) = self.begin_fold(&gone) {
            *self = before;
            return Err(e);
        }
        Ok(gone)
    }

    /// Holders still folding back into this home.
    pub fn leaving(&self) -> &[Vec<u8>] {
        self.transfers().map_or(&[], |t| t.leaving.as_slice())
    }

    /// On a holder: seals it into `home`, making everything it holds (value and floor) one
    /// transfer to the home. A holder already sealed into `home` is left as it is (Ok(None)).
    pub fn seal_into(
        &mut self,
        home: &[u8],
        now_ms: i64,
    ) -> Result<Option<Outgoing>, TransferError> {
        if let Some(into) = self.transfers().and_then(|t| t.sealed_into.as_deref()) {
            return if into == home {
                Ok(None)
            } else {
                Err(TransferError::Sealed)
            };
        }
        let df = self.floor().map_or(0, |f| f.floor);
        let entry = self.start_transfer(home, self.value, df, now_ms)?;
        self.transfers_mut().sealed_into = Some(home.to_vec());
        Ok(Some(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credit_of(c: &mut Counter, giver: &[u8], o: &Outgoing) -> Result<bool, TransferError> {
        c.apply_credit(giver, o.seq, o.dv, o.df)
    }

    #[test]
    fn a_transfer_moves_units_once_whatever_repeats() {
        let mut giver = Counter::plain(10);
        let mut receiver = Counter::plain(5);
        let out = giver.start_transfer(b"r", 4, 0, 1).unwrap();
        assert_eq!(giver.value(), 6);
        assert_eq!(
            giver.units_in_hand(),
            Some(10),
            "in flight counts at the giver"
        );
        assert_eq!(
            giver.start_transfer(b"r", 1, 0, 2),
            Err(TransferError::Busy),
            "one at a time per pair"
        );
        assert!(credit_of(&mut receiver, b"g", &out).unwrap());
        assert!(!credit_of(&mut receiver, b"g", &out).unwrap(), "a repeat");
        assert_eq!(receiver.value(), 9);
        assert!(giver.apply_ack(b"r", out.seq));
        assert!(!giver.apply_ack(b"r", out.seq));
        assert_eq!(giver.units_in_hand(), Some(6));
        assert!(giver.transfers().unwrap().outbox.is_empty());
        let next = giver.start_transfer(b"r", 1, 0, 1).unwrap();
        assert!(next.seq > out.seq, "seqs grow even when the clock does not");
        assert!(credit_of(&mut receiver, b"g", &next).unwrap());
        assert_eq!(receiver.value(), 10);
        assert_eq!(receiver.transfers().unwrap().applied_from(b"g"), next.seq);
    }

    #[test]
    fn seqs_grow_across_a_givers_lives() {
        let mut first = Counter::plain(3);
        let a = first.start_transfer(b"r", 1, 0, 1_000).unwrap();
        let mut again = Counter::plain(3);
        let b = again.start_transfer(b"r", 1, 0, 1_001).unwrap();
        assert!(b.seq > a.seq);
        assert_eq!(next_seq(u64::MAX, 5), u64::MAX);
        assert_eq!(next_seq(7, -5), 8);
    }

    #[test]
    fn refused_steps_change_nothing() {
        let mut giver = Counter::plain(i64::MIN);
        let before = giver.clone();
        assert!(giver.start_transfer(b"r", 1, 0, 1).is_err(), "overflow");
        assert!(giver.start_transfer(b"r", 0, 1, 1).is_err(), "no floor");
        assert!(giver.start_transfer(b"", 0, 0, 1).is_err());
        assert_eq!(giver, before);
        let mut floored = Counter::plain(10);
        floored.set_floor(Some(4)).unwrap();
        let before = floored.clone();
        assert!(
            floored.start_transfer(b"r", 7, 0, 1).is_err(),
            "below floor"
        );
        assert_eq!(floored, before);
        let mut receiver = Counter::plain(i64::MAX);
        let before = receiver.clone();
        assert!(receiver.apply_credit(b"g", 1, 1, 0).is_err());
        assert!(receiver.apply_credit(b"g", 0, 0, 0).is_err(), "seq 0");
        assert_eq!(receiver, before);
    }

    #[test]
    fn budget_moves_shift_floors_and_keep_budgets_summing() {
        let mut giver = Counter::from_shards(vec![10, 10]).unwrap();
        giver.set_floor(Some(0)).unwrap();
        let mut receiver = Counter::plain(0);
        receiver.set_floor(Some(0)).unwrap();
        // dv = 0, df = -5: the giver's floor rises by 5, the receiver's falls by 5.
        let out = giver.start_transfer(b"r", 0, -5, 1).unwrap();
        assert_eq!(giver.floor().unwrap().floor, 5);
        assert_eq!(giver.floor().unwrap().budgets.iter().sum::<i64>(), 15);
        credit_of(&mut receiver, b"g", &out).unwrap();
        assert_eq!(receiver.floor().unwrap().floor, -5);
        assert_eq!(receiver.floor().unwrap().budgets, vec![5]);
    }

    #[test]
    fn floor_units_reach_a_counter_without_a_floor_as_floor_0() {
        let mut giver = Counter::plain(10);
        giver.set_floor(Some(0)).unwrap();
        // A fresh holder: no key yet (a plain 0), no floor.
        let mut receiver = Counter::plain(0);
        let out = giver.start_transfer(b"r", 0, -4, 1).unwrap();
        credit_of(&mut receiver, b"g", &out).unwrap();
        assert_eq!(receiver.floor().map(|f| f.floor), Some(-4));
        assert_eq!(receiver.floor().unwrap().budgets, vec![4]);
        // The other way, from a floorless counter, it needs the value to cover the new floor.
        let mut floorless = Counter::plain(3);
        assert_eq!(
            floorless.start_transfer(b"r2", 0, -4, 2),
            Err(TransferError::Counter(CounterError::BelowFloor)),
            "floor 0 + 4 is above the value 3"
        );
        assert_eq!((floorless.value(), floorless.floor()), (3, None));
        floorless.start_transfer(b"r2", 0, -3, 3).unwrap();
        assert_eq!(floorless.floor().map(|f| f.floor), Some(3));
        // Value units alone leave a floorless counter floorless.
        let mut plain = Counter::plain(1);
        plain.apply_credit(b"g", 5, 2, 0).unwrap();
        assert_eq!((plain.value(), plain.floor()), (3, None));
    }

    /// A budget move of 0 units (a holder with a share of 0, or added by growing) still makes
    /// its receiver floored at 0, so it refuses to go below it before it ever holds budget; a
    /// fold of an empty holder into an unfloored home leaves the home unfloored.
    #[test]
    fn a_budget_move_of_nothing_makes_its_receiver_floored_and_a_fold_does_not() {
        let mut home = Counter::plain(0);
        home.set_floor(Some(0)).unwrap();
        let mut holder = Counter::plain(0);
        let out = home.start_transfer(b"h", 0, 0, 1).unwrap();
        credit_of(&mut holder, b"home", &out).unwrap();
        assert_eq!(holder.floor().map(|f| f.floor), Some(0));

        let mut unfloored = Counter::plain(7);
        unfloored.begin_fold(&[b"e".to_vec()]).unwrap();
        let mut empty = Counter::plain(0);
        let out = empty.seal_into(b"home", 2).unwrap().unwrap();
        credit_of(&mut unfloored, b"e", &out).unwrap();
        assert_eq!((unfloored.value(), unfloored.floor()), (7, None));
        assert!(unfloored.leaving().is_empty());
    }

    /// Every step of a fold, with the gather's rule (count the holder's units in hand while
    /// the home lists it as leaving): the total stays exact.
    #[test]
    fn fold_accounting_is_exact_at_every_step() {
        let mut home = Counter::plain(100);
        let mut holder = Counter::from_shards(vec![3, 4]).unwrap();
        let total = |home: &Counter, holder: &Counter| {
            let counted = home.leaving().iter().any(|l| l == b"h");
            home.value()
                + if counted {
                    holder.units_in_hand().unwrap()
                } else {
                    0
                }
        };
        home.begin_fold(&[b"h".to_vec()]).unwrap();
        assert_eq!(total(&home, &holder), 107, "listed as leaving");
        assert!(home.transfers().unwrap().knows_name(b"h"));
        let out = holder.seal_into(b"home", 5).unwrap().unwrap();
        assert_eq!((holder.value(), out.dv), (0, 7));
        assert!(holder.is_sealed());
        assert_eq!(total(&home, &holder), 107, "sealed, credit in flight");
        assert_eq!(holder.seal_into(b"home", 6), Ok(None), "sealing twice");
        assert_eq!(
            holder.seal_into(b"other", 6),
            Err(TransferError::Sealed),
            "sealed into another home"
        );
        assert_eq!(
            holder.start_transfer(b"x", 0, 0, 6),
            Err(TransferError::Sealed)
        );
        credit_of(&mut home, b"h", &out).unwrap();
        assert!(home.leaving().is_empty());
        assert_eq!(total(&home, &holder), 107, "credited, not acknowledged");
        assert!(holder.apply_ack(b"home", out.seq));
        assert_eq!(total(&home, &holder), 107, "acknowledged");
        assert!(home.transfers().unwrap().knows_name(b"h"), "never reused");
        assert!(holder.is_sealed(), "stays sealed until it expires");
    }

    #[test]
    fn validation_refuses_forged_states() {
        let out = |r: &[u8], seq| Outgoing {
            receiver: r.to_vec(),
            seq,
            dv: 1,
            df: 0,
        };
        let ok = Transfers {
            last_seq: 9,
            outbox: vec![out(b"a", 3), out(b"b", 9)],
            inbox: vec![(b"x".to_vec(), 1), (b"y".to_vec(), 2)],
            sealed_into: None,
            leaving: vec![b"z".to_vec()],
        };
        ok.validate().unwrap();
        let broken = [
            Transfers {
                outbox: vec![out(b"b", 3), out(b"a", 4)],
                ..ok.clone()
            },
            Transfers {
                outbox: vec![out(b"a", 10)],
                ..ok.clone()
            },
            Transfers {
                inbox: vec![(b"x".to_vec(), 0)],
                ..ok.clone()
            },
            Transfers {
                inbox: vec![(b"y".to_vec(), 1), (b"x".to_vec(), 1)],
                ..ok.clone()
            },
            Transfers {
                leaving: vec![b"z".to_vec(), b"z".to_vec()],
                ..ok.clone()
            },
            Transfers {
                sealed_into: Some(Vec::new()),
                ..ok.clone()
            },
            Transfers {
                leaving: vec![vec![b'n'; MAX_NAME + 1]],
                ..ok.clone()
            },
        ];
        for t in broken {
            assert!(t.validate().is_err(), "{t:?}");
        }
    }
}
