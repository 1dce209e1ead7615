//! How a counter is held behind the keyspace's value pointer.
//!
//! Most counters are cold: one shard, no options. Such a counter lives *in the pointer itself*
//! (tagged with its low bit, like Redis's own INT-encoded strings), so a cold counter costs no
//! allocation beyond the key and the module object. A key that is nothing but a `CTR.THROTTLE`
//! limiter holds its arrival time alone, in a box of 8 bytes tagged with the pointer's second
//! bit (a boxed counter with its limiter state takes 192: a rate limit per user or per client
//! is many such keys). Any other counter is a boxed [`Counter`]; boxes are 8-byte aligned, so
//! the two low bits of their pointers are free for the tags.

use std::ffi::c_void;

use super::Counter;

// The inline encoding keeps an i64 in a pointer: it needs a 64-bit usize.
const _: () = assert!(usize::BITS == 64, "inline counters need a 64-bit target");

/// Inline values must survive the one-bit shift of the tag.
const INLINE_MIN: i64 = i64::MIN >> 1;
const INLINE_MAX: i64 = i64::MAX >> 1;

/// An owned counter in its stored representation.
#[derive(Debug)]
pub struct CounterCell {
    raw: *mut c_void,
}

/// A borrowed view of a stored counter.
#[derive(Debug, Clone, Copy)]
pub enum CounterRef<'a> {
    Inline(i64),
    /// A key that is nothing but a limiter with no remembered reply
    /// ([`Counter::bare_limiter`]): its arrival time, ns.
    Limiter(i64),
    Boxed(&'a Counter),
}

impl CounterRef<'_> {
    pub fn value(self) -> i64 {
        match self {
            CounterRef::Inline(v) => v,
            CounterRef::Limiter(_) => 0,
            CounterRef::Boxed(c) => c.value(),
        }
    }

    /// Heap bytes held by the stored counter (0 when inline).
    pub fn heap_bytes(self) -> usize {
        match self {
            CounterRef::Inline(_) => 0,
            CounterRef::Limiter(_) => std::mem::size_of::<i64>(),
            CounterRef::Boxed(c) => std::mem::size_of::<Counter>() + c.heap_bytes(),
        }
    }

    /// What the stored counter really costs on the heap (0 when inline): what `MEMORY USAGE`
    /// reports beside Redis's own part.
    pub fn allocated_bytes(self) -> usize {
        match self {
            CounterRef::Inline(_) => 0,
            CounterRef::Limiter(_) => crate::memsize::usable_size(std::mem::size_of::<i64>()),
            CounterRef::Boxed(c) => c.allocated_bytes(),
        }
    }

    /// What the stored counter can still sell: its value above its own floor
    /// ([`Counter::budget`]).
    pub fn budget(self) -> i64 {
        match self {
            CounterRef::Inline(v) => v,
            CounterRef::Limiter(_) => 0,
            CounterRef::Boxed(c) => c.budget(),
        }
    }

    /// An owned copy as a full counter.
    pub fn to_counter(self) -> Counter {
        match self {
            CounterRef::Inline(v) => Counter::plain(v),
            CounterRef::Limiter(tat) => Counter::bare_limiter(tat),
            CounterRef::Boxed(c) => c.clone(),
        }
    }
}

fn is_inline(raw: *mut c_void) -> bool {
    raw as usize & 1 == 1
}

/// The tag of a compact limiter's box (a boxed counter's pointer has both low bits clear).
const LIMITER_TAG: usize = 0b10;

fn is_limiter(raw: *mut c_void) -> bool {
    raw as usize & 0b11 == LIMITER_TAG
}

/// The box of a compact limiter's arrival time, its tag removed.
fn limiter_box(raw: *mut c_void) -> *mut i64 {
    raw.map_addr(|a| a & !LIMITER_TAG).cast::<i64>()
}

impl CounterRef<'_> {
    /// Tokens held by the stored counter (add tokens and ledger entries).
    pub fn token_count(self) -> usize {
        match self {
            CounterRef::Inline(_) | CounterRef::Limiter(_) => 0,
            CounterRef::Boxed(c) => c.token_count(),
        }
    }

    pub fn shard_count(self) -> usize {
        match self {
            CounterRef::Inline(_) | CounterRef::Limiter(_) => 1,
            CounterRef::Boxed(c) => c.shard_count(),
        }
    }

    pub fn is_inline(self) -> bool {
        matches!(self, CounterRef::Inline(_))
    }
}

fn fits_inline(value: i64) -> bool {
    (INLINE_MIN..=INLINE_MAX).contains(&value)
}

impl CounterCell {
    /// Stores `counter` inline when it is plain and small enough, as a compact limiter when it
    /// is nothing but one, boxed otherwise.
    pub fn new(counter: Counter) -> Self {
        if counter.is_plain() {
            if let Some(cell) = CounterCell::inline(counter.value()) {
                return cell;
            }
        }
        if let Some(tat) = counter.bare_limiter_tat() {
            return CounterCell::limiter(tat);
        }
        CounterCell {
            raw: Box::into_raw(Box::new(counter)).cast(),
        }
    }

    /// A compact limiter holding the arrival time `tat_ns` ([`Counter::bare_limiter`]).
    pub fn limiter(tat_ns: i64) -> Self {
        let boxed: *mut c_void = Box::into_raw(Box::new(tat_ns)).cast();
        CounterCell {
            raw: boxed.map_addr(|a| a | LIMITER_TAG),
        }
    }

    /// A plain single-shard counter holding `value`, inline; None when the value needs a box.
    /// (The cold add's fast path: no `Counter` is built.)
    pub fn inline(value: i64) -> Option<Self> {
        fits_inline(value).then(|| CounterCell {
            raw: std::ptr::without_provenance_mut(((value << 1) | 1) as usize),
        })
    }

    /// The value of the counter stored at `raw` when it is inline; None when it is boxed.
    pub fn inline_value(raw: *mut c_void) -> Option<i64> {
        is_inline(raw).then_some((raw as usize as i64) >> 1)
    }

    /// The boxed counter stored at `raw`, for a change that keeps it boxed; None when the
    /// counter is inline or a compact limiter.
    ///
    /// # Safety
    /// `raw` must come from `into_raw` and be exclusively accessible for `'a`.
    pub unsafe fn boxed_mut<'a>(raw: *mut c_void) -> Option<&'a mut Counter> {
        if is_inline(raw) || is_limiter(raw) {
            return None;
        }
        // SAFETY: per the caller's contract, an untagged pointer is a live Box<Counter>.
        Some(unsafe { &mut *raw.cast::<Counter>() })
    }

    /// The stored form, still owned by this cell.
    pub fn as_raw(&self) -> *mut c_void {
        self.raw
    }

    /// Hands ownership to the caller (the keyspace).
    pub fn into_raw(self) -> *mut c_void {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    /// Takes ownership back from a pointer made by [`CounterCell::into_raw`].
    ///
    /// # Safety
    /// `raw` must come from `into_raw` and not be owned by anything else afterwards.
    pub unsafe fn from_raw(raw: *mut c_void) -> Self {
        CounterCell { raw }
    }

    /// Bytes this cell allocates on the heap (0 for an inline counter).
    pub fn heap_bytes(&self) -> usize {
        // SAFETY: self owns raw.
        unsafe { Self::borrow(self.raw) }.heap_bytes()
    }

    /// A view of the counter stored at `raw`.
    ///
    /// # Safety
    /// `raw` must come from `into_raw` and stay alive and unmodified for `'a`.
    pub unsafe fn borrow<'a>(raw: *mut c_void) -> CounterRef<'a> {
        if let Some(value) = Self::inline_value(raw) {
            CounterRef::Inline(value)
        } else if is_limiter(raw) {
            // SAFETY: a limiter-tagged pointer is a live Box<i64> per the caller's contract.
            CounterRef::Limiter(unsafe { *limiter_box(raw) })
        } else {
            // SAFETY: a non-inline pointer is a live Box<Counter> per the caller's contract.
            CounterRef::Boxed(unsafe { &*raw.cast::<Counter>() })
        }
    }

    /// Runs `f` on the counter stored at `raw`. When the counter's representation must change
    /// (an inline counter grew, or a boxed one became plain again), returns the new cell; the
    /// caller swaps it into the keyspace and then drops the old cell.
    ///
    /// # Safety
    /// `raw` must come from `into_raw` and be exclusively accessible for the call.
    pub unsafe fn update<R>(
        raw: *mut c_void,
        f: impl FnOnce(&mut Counter) -> R,
    ) -> (R, Option<CounterCell>) {
        if is_inline(raw) {
            let mut counter = Counter::plain((raw as usize as i64) >> 1);
            let result = f(&mut counter);
            let cell = CounterCell::new(counter);
            if cell.raw == raw {
                std::mem::forget(cell); // inline and unchanged: nothing to free
                (result, None)
            } else {
                (result, Some(cell))
            }
        } else if is_limiter(raw) {
            let boxed = limiter_box(raw);
            // SAFETY: exclusive access to a live Box<i64> per the caller's contract.
            let mut counter = Counter::bare_limiter(unsafe { *boxed });
            let result = f(&mut counter);
            match counter.bare_limiter_tat() {
                Some(tat) => {
                    // Still a bare limiter: its time changes in place.
                    // SAFETY: as above.
                    unsafe { *boxed = tat };
                    (result, None)
                }
                None => (result, Some(CounterCell::new(counter))),
            }
        } else {
            // SAFETY: exclusive access to a live Box<Counter> per the caller's contract.
            let counter = unsafe { &mut *raw.cast::<Counter>() };
            let result = f(counter);
            if counter.is_plain() && fits_inline(counter.value()) {
                (
                    result,
                    Some(CounterCell::new(Counter::plain(counter.value()))),
                )
            } else if let Some(tat) = counter.bare_limiter_tat() {
                (result, Some(CounterCell::limiter(tat)))
            } else {
                (result, None)
            }
        }
    }
}

impl Clone for CounterCell {
    fn clone(&self) -> Self {
        // SAFETY: self owns raw.
        match unsafe { Self::borrow(self.raw) } {
            CounterRef::Inline(_) => CounterCell { raw: self.raw },
            CounterRef::Limiter(tat) => CounterCell::limiter(tat),
            CounterRef::Boxed(c) => CounterCell::new(c.clone()),
        }
    }
}

impl Drop for CounterCell {
    fn drop(&mut self) {
        if is_limiter(self.raw) {
            // SAFETY: a limiter cell owns its Box<i64>.
            drop(unsafe { Box::from_raw(limiter_box(self.raw)) });
        } else if !is_inline(self.raw) {
            // SAFETY: any other non-inline cell owns its Box<Counter>.
            drop(unsafe { Box::from_raw(self.raw.cast::<Counter>()) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::{AddOp, CounterError};

    fn add(c: &mut Counter, delta: i64) -> Result<Option<i64>, CounterError> {
        c.apply_add(&AddOp {
            now: 0,
            event: 0,
            delta,
            shard: 0,
            shards: 1,
            token: None,
        })
    }

    fn roundtrip(counter: Counter) -> Counter {
        let raw = CounterCell::new(counter).into_raw();
        let back = unsafe { CounterCell::borrow(raw) }.to_counter();
        drop(unsafe { CounterCell::from_raw(raw) });
        back
    }

    #[test]
    fn small_plain_counters_are_inline() {
        for v in [0, 1, -1, INLINE_MIN, INLINE_MAX, 123_456_789] {
            let cell = CounterCell::new(Counter::plain(v));
            assert_eq!(cell.heap_bytes(), 0, "{v}");
            assert_eq!(unsafe { CounterCell::borrow(cell.raw) }.value(), v);
        }
    }

    #[test]
    fn inline_cells_are_exactly_the_inline_counters() {
        for v in [0, 1, -1, INLINE_MIN, INLINE_MAX, 123_456_789] {
            let cell = CounterCell::inline(v).expect("fits");
            assert_eq!(
                cell.as_raw(),
                CounterCell::new(Counter::plain(v)).into_raw()
            );
            assert_eq!(CounterCell::inline_value(cell.into_raw()), Some(v));
        }
        for v in [i64::MIN, i64::MAX, INLINE_MIN - 1, INLINE_MAX + 1] {
            assert!(CounterCell::inline(v).is_none(), "{v}");
            let boxed = CounterCell::new(Counter::plain(v));
            assert_eq!(CounterCell::inline_value(boxed.as_raw()), None);
        }
    }

    #[test]
    fn extreme_values_are_boxed_and_exact() {
        for v in [i64::MIN, i64::MAX, INLINE_MIN - 1, INLINE_MAX + 1] {
            let cell = CounterCell::new(Counter::plain(v));
            assert!(cell.heap_bytes() > 0, "{v}");
            drop(cell);
            assert_eq!(roundtrip(Counter::plain(v)).value(), v);
        }
    }

    #[test]
    fn sharded_counters_are_boxed() {
        let c = Counter::from_shards(vec![1, 2]).unwrap();
        assert_eq!(roundtrip(c.clone()), c);
    }

    #[test]
    fn update_grows_and_shrinks_representation() {
        let raw = CounterCell::new(Counter::plain(INLINE_MAX)).into_raw();
        let (r, new) = unsafe { CounterCell::update(raw, |c| add(c, 1)) };
        assert_eq!(r, Ok(Some(INLINE_MAX + 1)));
        let grown = new.expect("must be boxed now");
        drop(unsafe { CounterCell::from_raw(raw) });
        let raw = grown.into_raw();
        let (_, new) = unsafe { CounterCell::update(raw, |c| add(c, -1)) };
        let shrunk = new.expect("must be inline again");
        assert_eq!(shrunk.heap_bytes(), 0);
        drop(unsafe { CounterCell::from_raw(raw) });
        assert_eq!(
            unsafe { CounterCell::borrow(shrunk.raw) }.value(),
            INLINE_MAX
        );
    }

    #[test]
    fn update_in_place_reports_no_change() {
        let raw = CounterCell::new(Counter::plain(5)).into_raw();
        let (_, new) = unsafe { CounterCell::update(raw, |c| add(c, 0)) };
        assert!(new.is_none());
        let (_, new) = unsafe { CounterCell::update(raw, |c| add(c, 1)) };
        assert_eq!(
            unsafe { CounterCell::borrow(new.unwrap().into_raw()) }.value(),
            6
        );
    }

    fn throttle(c: &mut Counter, tat_ns: i64, token: Option<u64>) {
        c.apply_throttle(&crate::counter::ThrottleOp {
            now: 1_000,
            tat_ns: Some(tat_ns),
            token: token.map(|fp| crate::counter::TokenStamp {
                fp,
                expires_at: 60_000,
            }),
            reply: Default::default(),
            intent: 1,
        });
    }

    #[test]
    fn a_bare_limiter_is_its_arrival_time_in_eight_bytes() {
        let cell = CounterCell::new(Counter::bare_limiter(123_456));
        assert!(matches!(
            unsafe { CounterCell::borrow(cell.raw) },
            CounterRef::Limiter(123_456)
        ));
        assert_eq!(cell.heap_bytes(), 8);
        assert_eq!(CounterCell::inline_value(cell.raw), None);
        assert!(unsafe { CounterCell::boxed_mut(cell.raw) }.is_none());
        let copy = cell.clone();
        assert_ne!(copy.raw, cell.raw);
        assert_eq!(
            roundtrip(Counter::bare_limiter(123_456)),
            Counter::bare_limiter(123_456)
        );
        let mut built = Counter::default();
        throttle(&mut built, 123_456, None);
        assert_eq!(
            built,
            Counter::bare_limiter(123_456),
            "what a throttle call leaves"
        );
        assert_eq!(built.bare_limiter_tat(), Some(123_456));
    }

    #[test]
    fn a_limiter_changes_in_place_and_leaves_its_box_once_it_holds_more() {
        let raw = CounterCell::new(Counter::bare_limiter(1)).into_raw();
        let (_, new) = unsafe { CounterCell::update(raw, |c| throttle(c, 2, None)) };
        assert!(new.is_none(), "a new arrival time is written in place");
        assert!(matches!(
            unsafe { CounterCell::borrow(raw) },
            CounterRef::Limiter(2)
        ));
        // A tokened call remembers its reply: a boxed counter now.
        let (_, new) = unsafe { CounterCell::update(raw, |c| throttle(c, 3, Some(7))) };
        drop(unsafe { CounterCell::from_raw(raw) });
        let boxed = new.expect("boxed with its reply").into_raw();
        let CounterRef::Boxed(c) = (unsafe { CounterCell::borrow(boxed) }) else {
            panic!("a limiter remembering a reply is boxed");
        };
        assert_eq!(c.bare_limiter_tat(), None);
        // Its reply expired and swept by a later call: compact again.
        let (_, new) = unsafe {
            CounterCell::update(boxed, |c| {
                c.apply_throttle(&crate::counter::ThrottleOp {
                    now: 120_000,
                    tat_ns: Some(4),
                    token: None,
                    reply: Default::default(),
                    intent: 1,
                })
            })
        };
        drop(unsafe { CounterCell::from_raw(boxed) });
        let compact = new.expect("compact again");
        assert!(matches!(
            unsafe { CounterCell::borrow(compact.raw) },
            CounterRef::Limiter(4)
        ));
        // An add to a limiter's key makes it a counter with a value (refused by the commands,
        // but the cell follows whatever the counter holds).
        let raw = compact.into_raw();
        let (_, new) = unsafe { CounterCell::update(raw, |c| add(c, 5)) };
        drop(unsafe { CounterCell::from_raw(raw) });
        let grown = new.expect("no longer a bare limiter");
        assert_eq!(unsafe { CounterCell::borrow(grown.raw) }.value(), 5);
        assert!(!matches!(
            unsafe { CounterCell::borrow(grown.raw) },
            CounterRef::Limiter(_)
        ));
    }

    #[test]
    fn only_a_bare_limiter_is_compact() {
        let mut floored = Counter::bare_limiter(9);
        floored.set_floor(Some(0)).unwrap();
        assert_eq!(floored.bare_limiter_tat(), None);
        let mut ceiled = Counter::bare_limiter(9);
        ceiled.set_ceiling(Some(100)).unwrap();
        assert_eq!(ceiled.bare_limiter_tat(), None);
        assert!(!ceiled.is_throttle_only(), "a ceiling is other state");
        let mut remembered = Counter::default();
        throttle(&mut remembered, 9, Some(1));
        assert_eq!(remembered.bare_limiter_tat(), None);
        assert!(
            remembered.is_throttle_only(),
            "a limiter remembering a reply"
        );
        assert_eq!(Counter::plain(0).bare_limiter_tat(), None);
    }

    #[test]
    fn clone_is_deep() {
        let a = CounterCell::new(Counter::from_shards(vec![3, 4]).unwrap());
        let b = a.clone();
        assert_ne!(a.raw, b.raw);
        assert_eq!(unsafe { CounterCell::borrow(b.raw) }.value(), 7);
    }
}
