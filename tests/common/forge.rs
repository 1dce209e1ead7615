//! Hostile inputs for the reliability tests: integers at the edges, mutations of real
//! encodings, structured random CTR states and effects (written from the layouts in
//! docs/DESIGN.md, independently of the module's encoders), and DUMP payload framing.

use super::pnc::Rng;
use super::{ivarint, rdb_len, seal_dump, uvarint};

/// Integers a hostile or buggy client sends most: the i64 edges, the neighbours of 0, times
/// around `now`, and random ones.
pub fn edge_i64(rng: &mut Rng, now: i64) -> i64 {
    const EDGES: [i64; 14] = [
        0,
        1,
        -1,
        2,
        i64::MAX,
        i64::MIN,
        i64::MAX - 1,
        i64::MIN + 1,
        1 << 62,
        -(1 << 62),
        1 << 32,
        60_000,
        3_600_000,
        1_024,
    ];
    match rng.below(10) {
        0..=4 => EDGES[rng.below(EDGES.len() as u64) as usize],
        5 => now + rng.below(7_200_000) as i64 - 3_600_000,
        6 => now - now.rem_euclid(60_000) - 60_000 * rng.below(5) as i64,
        7 => rng.below(40) as i64 - 10,
        _ => rng.next() as i64,
    }
}

/// A value a well-behaved client or master sends: small numbers, or times near `now` (inside
/// the default token window, aligned to minutes half of the time).
pub fn tame_i64(rng: &mut Rng, now: i64) -> i64 {
    match rng.below(4) {
        0 | 1 => rng.below(20) as i64 - 5,
        2 => now - rng.below(1_800_000) as i64,
        _ => now - now.rem_euclid(60_000) - 60_000 * rng.below(5) as i64,
    }
}

/// A byte string of `len` random bytes.
pub fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next() as u8).collect()
}

/// `bytes` with one to four random mutations: bit flips, byte overwrites, truncation, appended
/// or inserted bytes, an inserted maximal varint, a duplicated range.
pub fn mutate(rng: &mut Rng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(out.len() as u64 + 1) as usize;
        match rng.below(8) {
            0 | 1 if at < out.len() => out[at] ^= 1 << rng.below(8),
            2 if at < out.len() => out[at] = rng.next() as u8,
            3 => out.truncate(at),
            4 => {
                let len = 1 + rng.below(8) as usize;
                out.extend(random_bytes(rng, len));
            }
            5 => {
                let b = rng.next() as u8;
                out.insert(at, b);
            }
            6 => {
                let big = if rng.below(2) == 0 {
                    uvarint(u64::MAX)
                } else {
                    uvarint(1 << 40)
                };
                out.splice(at..at, big);
            }
            _ if !out.is_empty() => {
                let from = rng.below(out.len() as u64) as usize;
                let to = (from + 1 + rng.below(16) as usize).min(out.len());
                let piece = out[from..to].to_vec();
                out.splice(at..at, piece);
            }
            _ => out.push(rng.next() as u8),
        }
    }
    out
}

/// A random `CTR.APPLY` effect following the documented layout (format 1), with fields at the
/// edges (or `tame` ones, as a master would send); sometimes with a wrong format, kind or flag,
/// or cut short.
pub fn random_effect(rng: &mut Rng, now: i64, tame: bool) -> Vec<u8> {
    let value = |rng: &mut Rng| {
        if tame {
            tame_i64(rng, now)
        } else {
            edge_i64(rng, now)
        }
    };
    let mut b = vec![if !tame && rng.below(20) == 0 { 2 } else { 1 }];
    let kind = if !tame && rng.below(20) == 0 {
        rng.below(8) as u8
    } else {
        1 + rng.below(4) as u8
    };
    b.push(kind);
    let t = if tame || rng.below(2) == 0 {
        now
    } else {
        edge_i64(rng, now)
    };
    b.extend(ivarint(t));
    match kind {
        1 | 3 => {
            b.extend(ivarint(value(rng)));
            let shards = if tame {
                [1u64, 2, 4][rng.below(3) as usize]
            } else {
                [1u64, 2, 4, 16, 1024, 1025, 0][rng.below(7) as usize]
            };
            let shard = if !tame && rng.below(4) == 0 {
                shards
            } else {
                rng.below(shards.max(1))
            };
            b.extend(uvarint(shard));
            b.extend(uvarint(shards));
        }
        4 => {
            b.extend(ivarint(value(rng)));
            let width = if tame {
                60_000
            } else {
                [1, 60_000, 7, i64::MAX, 0, -1][rng.below(6) as usize]
            };
            b.extend(ivarint(width));
            b.extend(ivarint(value(rng).max(1)));
        }
        _ => {}
    }
    let flags = if tame {
        // Only the flags a master sets for this kind.
        let token = u8::from(kind != 4 && rng.below(2) == 0);
        let event = match kind {
            1 | 3 => 4,
            4 => 8,
            _ => 0,
        } * u8::from(rng.below(2) == 0);
        token | event
    } else if rng.below(20) == 0 {
        rng.next() as u8
    } else {
        rng.below(16) as u8
    };
    b.push(flags);
    if flags & 1 != 0 {
        b.extend(rng.next().to_le_bytes());
        b.extend(ivarint(value(rng)));
    }
    for bit in [2u8, 4, 8] {
        if flags & bit != 0 {
            b.extend(ivarint(value(rng)));
        }
    }
    if !tame && rng.below(10) == 0 {
        b = mutate(rng, &b);
    }
    b
}

/// Splits `total` into `n` parts (the last takes the rest, wrapping if it must).
fn split(rng: &mut Rng, total: i64, n: usize, non_negative: bool) -> Vec<i64> {
    let mut parts = Vec::with_capacity(n);
    let mut rest = total;
    for _ in 1..n {
        let part = if non_negative {
            if rest <= 0 {
                0
            } else {
                (rng.next() % (rest as u64).saturating_add(1)) as i64
            }
        } else {
            edge_i64(rng, 0) / 4
        };
        parts.push(part);
        rest = rest.wrapping_sub(part);
    }
    parts.push(rest);
    parts
}

/// A random CTR state following the documented layout (format 1): every section, mostly
/// consistent (shards summing to the value, budgets to the headroom, sorted tokens, aligned
/// buckets), with values at the edges; sometimes inconsistent or mutated.
pub fn random_ctr_state(rng: &mut Rng, now: i64) -> Vec<u8> {
    let mut b = vec![1u8];
    let mut value = edge_i64(rng, now);
    let shards = [1usize, 2, 3, 8, 1024][rng.below(5) as usize];
    let floored = rng.below(3) == 0;
    let floor = if floored {
        let f = edge_i64(rng, now);
        if value < f {
            value = f;
        }
        f
    } else {
        0
    };
    b.push(1);
    b.extend(ivarint(value));
    if shards > 1 {
        b.push(2);
        b.extend(uvarint(shards as u64));
        for s in split(rng, value, shards, false) {
            b.extend(ivarint(s));
        }
    }
    let token_section = |rng: &mut Rng, b: &mut Vec<u8>, tag: u8, ledger: bool| {
        let n = 1 + rng.below(40) as usize;
        let mut fps: Vec<u64> = (0..n).map(|_| rng.next()).collect();
        fps.sort_unstable();
        fps.dedup();
        b.push(tag);
        b.extend(ivarint(edge_i64(rng, now)));
        b.extend(uvarint(fps.len() as u64));
        for fp in fps {
            b.extend(fp.to_le_bytes());
            b.extend(ivarint(edge_i64(rng, now)));
            if ledger {
                if rng.below(2) == 0 {
                    b.push(0);
                } else {
                    b.push(1);
                    b.extend(ivarint(edge_i64(rng, now)));
                }
            }
        }
    };
    if rng.below(2) == 0 {
        token_section(rng, &mut b, 3, false);
    }
    if floored {
        b.push(4);
        b.extend(ivarint(floor));
        b.extend(uvarint(shards as u64));
        for budget in split(rng, value.wrapping_sub(floor), shards, true) {
            b.extend(ivarint(budget));
        }
    }
    if rng.below(2) == 0 {
        token_section(rng, &mut b, 5, true);
    }
    if rng.below(2) == 0 {
        let width = [1i64, 7, 60_000, 1 << 40][rng.below(4) as usize];
        let align = |t: i64| t - t.rem_euclid(width);
        let since = align(edge_i64(rng, now) / 2);
        b.push(6);
        b.extend(ivarint(width));
        b.extend(ivarint(edge_i64(rng, now).max(1)));
        b.extend(ivarint(since));
        if rng.below(2) == 0 {
            b.push(1);
            b.extend(ivarint(since));
        } else {
            b.push(0);
        }
        b.extend(ivarint(edge_i64(rng, now)));
        b.extend(uvarint(rng.next()));
        b.extend(uvarint(rng.below(100)));
        let n = rng.below(20) as usize;
        b.extend(uvarint(n as u64));
        let mut end = since;
        for _ in 0..n {
            end = end.saturating_add(width * (1 + rng.below(3) as i64));
            b.extend(ivarint(end));
            b.extend(ivarint(edge_i64(rng, now) / 64));
        }
    }
    b.push(0);
    if rng.below(8) == 0 {
        b = mutate(rng, &b);
    }
    b
}

/// The parts of a module value's DUMP payload: the 10-byte header (type byte and module id),
/// the one string buffer the module saved, and the RDB version. None when the payload is not
/// framed that way, e.g. when the server LZF-compressed the buffer (run servers whose payloads
/// are parsed with `--rdbcompression no`).
pub struct DumpFrame {
    pub header: Vec<u8>,
    pub blob: Vec<u8>,
    pub rdb_version: u16,
}

impl DumpFrame {
    pub fn parse(payload: &[u8]) -> Option<DumpFrame> {
        let n = payload.len();
        if n < 22 {
            return None;
        }
        let rdb_version = u16::from_le_bytes([payload[n - 10], payload[n - 9]]);
        let body = &payload[..n - 10];
        if body[0] != 7 || body[1] != 0x81 || body[10] != 5 {
            return None;
        }
        let (len, used) = match body[11] >> 6 {
            0 => (usize::from(body[11] & 0x3f), 1),
            1 => (
                (usize::from(body[11] & 0x3f) << 8) | usize::from(body[12]),
                2,
            ),
            _ if body[11] == 0x80 => (
                u32::from_be_bytes(body.get(12..16)?.try_into().ok()?) as usize,
                5,
            ),
            _ => return None,
        };
        let start = 11 + used;
        let blob = body.get(start..start + len)?.to_vec();
        (body.get(start + len..) == Some(&[0][..])).then(|| DumpFrame {
            header: body[..10].to_vec(),
            blob,
            rdb_version,
        })
    }

    /// A payload with `blob` in place of the module's buffer, sealed with a valid CRC64.
    pub fn with_blob(&self, blob: &[u8]) -> Vec<u8> {
        let mut body = self.header.clone();
        body.push(5);
        body.extend(rdb_len(blob.len()));
        body.extend_from_slice(blob);
        body.push(0);
        seal_dump(&body, self.rdb_version)
    }

    /// The whole body (header, framing and blob) with its CRC64 fixed after `f` changed it.
    pub fn resealed(&self, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut body = self.header.clone();
        body.push(5);
        body.extend(rdb_len(self.blob.len()));
        body.extend_from_slice(&self.blob);
        body.push(0);
        f(&mut body);
        seal_dump(&body, self.rdb_version)
    }
}
