//! The RESP2 a read link speaks (see `runtime::read_links`): commands encoded as arrays of bulk
//! strings, and the replies they get back, parsed incrementally from a byte buffer. Only the
//! reply kinds the link's own commands get are accepted (simple strings, errors, integers, bulk
//! strings); anything else is invalid and the link is closed.

/// One reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespReply {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Integer(i64),
    /// A bulk string (None: the null bulk).
    Bulk(Option<Vec<u8>>),
}

/// What the front of a buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole reply, and how many bytes it took.
    Reply(RespReply, usize),
    /// Not all of it yet.
    Incomplete,
    /// Not a reply the link accepts (or a bulk longer than allowed).
    Invalid,
}

/// The longest line (simple string, error, length) accepted before its end is seen.
const MAX_LINE: usize = 64 << 10;

/// Encodes a command as RESP: an array of bulk strings.
pub fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    let size: usize = args.iter().map(|a| a.len() + 16).sum();
    let mut out = Vec::with_capacity(size + 16);
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The line at the front of `buf` (without its CRLF) and the bytes it took with it.
fn line(buf: &[u8]) -> Result<Option<(&[u8], usize)>, ()> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) => Ok(Some((&buf[..end], end + 2))),
        None if buf.len() > MAX_LINE => Err(()),
        None => Ok(None),
    }
}

fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Parses the reply at the front of `buf`; bulk strings longer than `max_bulk` are invalid.
pub fn parse(buf: &[u8], max_bulk: usize) -> Parsed {
    let Some((&kind, rest)) = buf.split_first() else {
        return Parsed::Incomplete;
    };
    let (text, used) = match line(rest) {
        Ok(Some(found)) => found,
        Ok(None) => return Parsed::Incomplete,
        Err(()) => return Parsed::Invalid,
    };
    let used = used + 1;
    match kind {
        b'+' => Parsed::Reply(RespReply::Simple(text.to_vec()), used),
        b'-' => Parsed::Reply(RespReply::Error(text.to_vec()), used),
        b':' => match number(text) {
            Some(n) => Parsed::Reply(RespReply::Integer(n), used),
            None => Parsed::Invalid,
        },
        b'$' => match number(text) {
            Some(-1) => Parsed::Reply(RespReply::Bulk(None), used),
            Some(len) => bulk(buf, used, len, max_bulk),
            None => Parsed::Invalid,
        },
        _ => Parsed::Invalid,
    }
}

/// A bulk string of `len` bytes starting at `at`, followed by CRLF.
fn bulk(buf: &[u8], at: usize, len: i64, max_bulk: usize) -> Parsed {
    let Some(len) = usize::try_from(len).ok().filter(|&l| l <= max_bulk) else {
        return Parsed::Invalid;
    };
    let end = at + len;
    if buf.len() < end + 2 {
        return Parsed::Incomplete;
    }
    if &buf[end..end + 2] != b"\r\n" {
        return Parsed::Invalid;
    }
    Parsed::Reply(RespReply::Bulk(Some(buf[at..end].to_vec())), end + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            encode_command(&[b"CTR.GATHER", b"a\r\nb"]),
            b"*2\r\n$10\r\nCTR.GATHER\r\n$4\r\na\r\nb\r\n".to_vec()
        );
    }

    #[test]
    fn each_reply_kind_parses_with_its_length() {
        let cases: [(&[u8], RespReply); 5] = [
            (b"+OK\r\n", RespReply::Simple(b"OK".to_vec())),
            (b"-ERR no\r\n", RespReply::Error(b"ERR no".to_vec())),
            (b":-12\r\n", RespReply::Integer(-12)),
            (b"$3\r\na\r\n\r\n", RespReply::Bulk(Some(b"a\r\n".to_vec()))),
            (b"$-1\r\n", RespReply::Bulk(None)),
        ];
        for (bytes, reply) in cases {
            let mut buf = bytes.to_vec();
            buf.extend_from_slice(b"+next\r\n");
            assert_eq!(parse(&buf, 100), Parsed::Reply(reply, bytes.len()));
        }
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete() {
        let whole = b"$5\r\nhello\r\n";
        for n in 0..whole.len() {
            assert_eq!(parse(&whole[..n], 100), Parsed::Incomplete, "{n}");
        }
    }

    #[test]
    fn what_the_link_never_asks_for_is_invalid() {
        for bad in [
            &b"*1\r\n:1\r\n"[..],
            b"$5\r\nhelloXX",
            b"$-2\r\n",
            b"$x\r\n",
            b":1.5\r\n",
            b"_\r\n",
            b"$101\r\n",
        ] {
            assert_eq!(parse(bad, 100), Parsed::Invalid, "{bad:?}");
        }
        assert_eq!(parse(&[b'+'; MAX_LINE + 2], 100), Parsed::Invalid);
    }
}
