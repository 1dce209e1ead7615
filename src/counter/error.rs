//! Errors of the counter core. Each renders as the exact error text a client sees, so the shell
//! never has to invent wording and tests can compare strings.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterError {
    /// The result would leave the signed 64-bit range.
    Overflow,
}

impl CounterError {
    pub const fn message(self) -> &'static str {
        match self {
            CounterError::Overflow => "ERR counter overflow",
        }
    }
}

impl fmt::Display for CounterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for CounterError {}
