//! Errors of the counter core. Each renders as the exact error text a client sees, so the shell
//! never has to invent wording and tests can compare strings.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterError {
    /// The result would leave the signed 64-bit range.
    Overflow,
    /// The value would be, or already is, below the requested floor.
    BelowFloor,
    /// An add stamped at or before the counter's reconciled watermark.
    Late,
    /// A reconcile watermark that cannot be used.
    Watermark(crate::counter::history::WatermarkError),
    /// A replicated or restored operation that no master would produce.
    InvalidOperation(&'static str),
    /// A reset to 0 on a counter whose floor is above 0.
    ClearAboveFloor,
    /// A clear of a floored spread counter's total: its holders hold budgets.
    ClearFlooredSpread,
    /// The value would be, or already is, above the requested ceiling.
    AboveCeiling,
    /// A ceiling set, changed or taken off on a spread counter's member (its home or a holder):
    /// the members' shares would no longer sum to the counter's ceiling.
    CeilingOnSpread,
    /// A clear of a ceiled spread counter's total: its members hold shares of its ceiling.
    ClearCeiledSpread,
    /// `CTR.INCREX` on a spread counter's member: its bounds are one key's.
    IncrexOnSpread,
    /// A sliding window's configuration, or a change a windowed counter does not take (the
    /// whole error text).
    Window(&'static str),
}

impl CounterError {
    pub fn message(self) -> String {
        match self {
            CounterError::Overflow => "ERR counter overflow".to_string(),
            CounterError::BelowFloor => "ERR value below floor".to_string(),
            CounterError::Late => {
                "ERR event time is at or before the counter's reconciled watermark".to_string()
            }
            CounterError::Watermark(w) => w.message(),
            CounterError::InvalidOperation(why) => format!("ERR invalid counter operation: {why}"),
            CounterError::Window(text) => text.to_string(),
            CounterError::ClearAboveFloor => {
                "ERR cannot clear to 0: the counter's floor is above 0 (lower it with CTR.FLOOR first)"
                    .to_string()
            }
            CounterError::AboveCeiling => "ERR value above ceiling".to_string(),
            CounterError::CeilingOnSpread => {
                "ERR the ceiling of a spread counter is set before it spreads (its holders keep ceilings of their own)"
                    .to_string()
            }
            CounterError::ClearCeiledSpread => {
                "ERR cannot clear a ceiled spread counter: its holders hold shares of its ceiling (shrink it with CTR.SPREAD key 1 first)"
                    .to_string()
            }
            CounterError::IncrexOnSpread => {
                "ERR CTR.INCREX takes a counter that is not spread: add to a spread counter with CTR.ADD, bounded by CTR.FLOOR and CTR.CEIL set before it spreads"
                    .to_string()
            }
            CounterError::ClearFlooredSpread => {
                "ERR cannot clear a floored spread counter: its holders hold budgets (shrink it with CTR.SPREAD key 1 first)"
                    .to_string()
            }
        }
    }
}

impl fmt::Display for CounterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for CounterError {}
