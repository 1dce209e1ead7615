//! How a counter is held behind the keyspace's value pointer.
//!
//! Most counters are cold: one shard, no options. Such a counter lives *in the pointer itself*
//! (tagged with its low bit, like Redis's own INT-encoded strings), so a cold counter costs no
//! allocation beyond the key and the module object. Any other counter is a boxed [`Counter`];
//! boxes are 8-byte aligned, so their low bit is always 0.

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
    Boxed(&'a Counter),
}

impl CounterRef<'_> {
    pub fn value(self) -> i64 {
        match self {
            CounterRef::Inline(v) => v,
            CounterRef::Boxed(c) => c.value(),
        }
    }

    /// Heap bytes held by the stored counter (0 when inline).
    pub fn heap_bytes(self) -> usize {
        match self {
            CounterRef::Inline(_) => 0,
            CounterRef::Boxed(c) => std::mem::size_of::<Counter>() + c.heap_bytes(),
        }
    }

    /// What the stored counter really costs on the heap (0 when inline): what `MEMORY USAGE`
    /// reports beside Redis's own part.
    pub fn allocated_bytes(self) -> usize {
        match self {
            CounterRef::Inline(_) => 0,
            CounterRef::Boxed(c) => c.allocated_bytes(),
        }
    }

    /// An owned copy as a full counter.
    pub fn to_counter(self) -> Counter {
        match self {
            CounterRef::Inline(v) => Counter::plain(v),
            CounterRef::Boxed(c) => c.clone(),
        }
    }
}

fn is_inline(raw: *mut c_void) -> bool {
    raw as usize & 1 == 1
}

impl CounterRef<'_> {
    /// Tokens held by the stored counter (add tokens and ledger entries).
    pub fn token_count(self) -> usize {
        match self {
            CounterRef::Inline(_) => 0,
            CounterRef::Boxed(c) => c.token_count(),
        }
    }

    pub fn shard_count(self) -> usize {
        match self {
            CounterRef::Inline(_) => 1,
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
    /// Stores `counter` inline when it is plain and small enough, boxed otherwise.
    pub fn new(counter: Counter) -> Self {
        if counter.is_plain() {
            if let Some(cell) = CounterCell::inline(counter.value()) {
                return cell;
            }
        }
        CounterCell {
            raw: Box::into_raw(Box::new(counter)).cast(),
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

    /// The boxed counter stored at `raw`, for a change that keeps it boxed.
    ///
    /// # Safety
    /// `raw` must come from `into_raw`, hold a boxed counter (not inline), and be exclusively
    /// accessible for `'a`.
    pub unsafe fn boxed_mut<'a>(raw: *mut c_void) -> &'a mut Counter {
        debug_assert!(!is_inline(raw));
        // SAFETY: per the caller's contract.
        unsafe { &mut *raw.cast::<Counter>() }
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
        } else {
            // SAFETY: exclusive access to a live Box<Counter> per the caller's contract.
            let counter = unsafe { &mut *raw.cast::<Counter>() };
            let result = f(counter);
            if counter.is_plain() && fits_inline(counter.value()) {
                (
                    result,
                    Some(CounterCell::new(Counter::plain(counter.value()))),
                )
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
            CounterRef::Boxed(c) => CounterCell::new(c.clone()),
        }
    }
}

impl Drop for CounterCell {
    fn drop(&mut self) {
        if !is_inline(self.raw) {
            // SAFETY: a non-inline cell owns its Box<Counter>.
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

    #[test]
    fn clone_is_deep() {
        let a = CounterCell::new(Counter::from_shards(vec![3, 4]).unwrap());
        let b = a.clone();
        assert_ne!(a.raw, b.raw);
        assert_eq!(unsafe { CounterCell::borrow(b.raw) }.value(), 7);
    }
}
