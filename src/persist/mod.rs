//! Encodings and the Redis type callbacks that persist the module's values.

pub mod codec;
pub mod ctr_format;
pub mod ctr_type;
pub mod effect;
pub mod pnc_format;
pub mod pnc_type;
