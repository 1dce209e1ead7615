//! Replica ids: the names of the slots of a PN-Counter.
//!
//! Any id (in a state blob, an RDB value, a replicated command): 1 to [`MAX_ID_LEN`] bytes of
//! `[A-Za-z0-9_.-]`. An id an operator configures (`ctr.replica-id`): 1 to
//! [`MAX_CONFIGURED_ID_LEN`] bytes of `[A-Za-z0-9_-]`, no `.`: the `.` is reserved for the ids
//! a deployment moves to after a failover (`<configured>.<12 hex digits>`), which therefore
//! always fit in [`MAX_ID_LEN`] and can be told apart from any configured id.

use std::fmt;

/// Longest replica id accepted anywhere.
pub const MAX_ID_LEN: usize = 64;
/// Longest id an operator may configure (leaves room for the `.<12 hex>` failover suffix).
pub const MAX_CONFIGURED_ID_LEN: usize = 48;

/// Ids up to this many bytes are stored inline (no heap allocation, no pointer to chase):
/// random ids (18 bytes) and failover successors of names up to 9 bytes fit.
const INLINE_LEN: usize = 22;

/// A validated replica id (ASCII). Ordered bytewise, which is the order entries are kept in.
#[derive(Clone)]
pub struct ReplicaId(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE_LEN] },
    Heap(Box<str>),
}

impl PartialEq for ReplicaId {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for ReplicaId {}

impl PartialOrd for ReplicaId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ReplicaId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl std::hash::Hash for ReplicaId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

/// Why a byte string is not a replica id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdError {
    Empty,
    TooLong,
    BadCharacter,
}

impl IdError {
    pub const fn message(self) -> &'static str {
        match self {
            IdError::Empty => "replica id is empty",
            IdError::TooLong => "replica id is too long",
            IdError::BadCharacter => "replica id may only hold A-Z a-z 0-9 _ - .",
        }
    }
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

fn id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.'
}

impl ReplicaId {
    /// Any id: 1..=64 bytes of `[A-Za-z0-9_.-]`.
    pub fn parse(bytes: &[u8]) -> Result<ReplicaId, IdError> {
        if bytes.is_empty() {
            return Err(IdError::Empty);
        }
        if bytes.len() > MAX_ID_LEN {
            return Err(IdError::TooLong);
        }
        if !bytes.iter().all(|b| id_byte(*b)) {
            return Err(IdError::BadCharacter);
        }
        Ok(ReplicaId::from_ascii(bytes))
    }

    /// Stores already-validated ASCII bytes.
    fn from_ascii(bytes: &[u8]) -> ReplicaId {
        if bytes.len() <= INLINE_LEN {
            let mut inline = [0u8; INLINE_LEN];
            inline[..bytes.len()].copy_from_slice(bytes);
            ReplicaId(Repr::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            })
        } else {
            // ASCII is valid UTF-8; the lossy conversion never replaces anything here.
            ReplicaId(Repr::Heap(String::from_utf8_lossy(bytes).into()))
        }
    }

    /// An id an operator configures: 1..=48 bytes of `[A-Za-z0-9_-]`.
    pub fn parse_configured(bytes: &[u8]) -> Result<ReplicaId, ConfiguredIdError> {
        if bytes.len() > MAX_CONFIGURED_ID_LEN {
            return Err(ConfiguredIdError);
        }
        if bytes.contains(&b'.') {
            return Err(ConfiguredIdError);
        }
        ReplicaId::parse(bytes).map_err(|_| ConfiguredIdError)
    }

    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len).min(INLINE_LEN)],
            Repr::Heap(s) => s.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        // Always ASCII (checked when made), so this never falls back.
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// Heap bytes the id owns (0 when stored inline).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(s) => s.len(),
        }
    }

    /// What the id's heap allocation really costs (0 when stored inline).
    pub fn allocated_bytes(&self) -> usize {
        crate::memsize::usable_size(self.heap_bytes())
    }

    /// True when `self` is `base` or one of its failover successors (`base.<suffix>`).
    pub fn descends_from(&self, base: &ReplicaId) -> bool {
        match self.as_bytes().strip_prefix(base.as_bytes()) {
            Some([]) => true,
            Some(rest) => rest.starts_with(b"."),
            None => false,
        }
    }

    /// A random id for a deployment without a configured one: `r-<16 hex digits>`.
    pub fn random(bytes: [u8; 8]) -> ReplicaId {
        ReplicaId::from_ascii(format!("r-{}", hex(&bytes)).as_bytes())
    }

    /// The id a deployment configured as `base` moves to after a failover:
    /// `<base>.<12 hex digits>` (at most 48 + 13 bytes, so always a valid id).
    pub fn successor(base: &ReplicaId, bytes: [u8; 8]) -> ReplicaId {
        ReplicaId::from_ascii(format!("{}.{}", base.as_str(), hex(&bytes[..6])).as_bytes())
    }
}

/// The configured-id error; its text is what `CONFIG SET` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfiguredIdError;

impl ConfiguredIdError {
    pub const MESSAGE: &'static str =
        "ctr.replica-id must be empty (automatic) or 1 to 48 characters of A-Z a-z 0-9 _ -";
}

impl fmt::Display for ConfiguredIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::MESSAGE)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl fmt::Debug for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in [&b"a"[..], b"us-east-1", b"A.b_c-9", &[b'x'; 64]] {
            assert!(ReplicaId::parse(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn refuses_everything_else() {
        assert_eq!(ReplicaId::parse(b""), Err(IdError::Empty));
        assert_eq!(ReplicaId::parse(&[b'x'; 65]), Err(IdError::TooLong));
        for bad in [
            &b"a b"[..],
            b"a\0",
            b"a/b",
            b"\xff",
            b"caf\xc3\xa9",
            b"a%s",
            b"a\n",
        ] {
            assert_eq!(ReplicaId::parse(bad), Err(IdError::BadCharacter), "{bad:?}");
        }
    }

    #[test]
    fn short_ids_are_inline_long_ones_on_the_heap_and_both_compare_bytewise() {
        let short = ReplicaId::parse(&[b'a'; 22]).unwrap();
        let long = ReplicaId::parse(&[b'a'; 23]).unwrap();
        assert_eq!(short.heap_bytes(), 0);
        assert_eq!(long.heap_bytes(), 23);
        assert_eq!(short.as_str().len(), 22);
        assert_eq!(long.as_str().len(), 23);
        assert!(short < long, "a prefix sorts first");
        let b = ReplicaId::parse(b"b").unwrap();
        assert!(long < b && short < b);
        assert_eq!(long.clone(), long);
        assert_ne!(short, long);
        assert_eq!(std::mem::size_of::<ReplicaId>(), 24);
    }

    #[test]
    fn configured_ids_are_shorter_and_have_no_dot() {
        assert!(ReplicaId::parse_configured(b"us-east_1").is_ok());
        assert!(ReplicaId::parse_configured(&[b'x'; 48]).is_ok());
        assert!(ReplicaId::parse_configured(&[b'x'; 49]).is_err());
        assert!(ReplicaId::parse_configured(b"a.b").is_err());
        assert!(ReplicaId::parse_configured(b"").is_err());
        assert!(ReplicaId::parse_configured(b"a b").is_err());
    }

    #[test]
    fn successors_are_valid_and_descend_from_their_base() {
        let base = ReplicaId::parse_configured(&[b'x'; 48]).unwrap();
        let next = ReplicaId::successor(&base, [0xab; 8]);
        assert_eq!(next.as_str().len(), 61);
        assert!(ReplicaId::parse(next.as_bytes()).is_ok());
        assert!(next.descends_from(&base));
        assert!(base.descends_from(&base));
        let a = ReplicaId::parse(b"a").unwrap();
        assert!(!ReplicaId::parse(b"ab").unwrap().descends_from(&a));
        assert!(ReplicaId::parse(b"a.0123456789ab")
            .unwrap()
            .descends_from(&a));
        let random = ReplicaId::random([1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(random.as_str(), "r-0102030405060708");
        assert!(ReplicaId::parse(random.as_bytes()).is_ok());
    }
}
