//! The versioned encoding of a CTR counter, shared by RDB, DUMP/RESTORE, the AOF restore
//! command and the digest.
//!
//! Layout, format 1:
//! ```text
//! u8 format (= 1)
//! then sections in strictly increasing tag order, each `u8 tag` + body:
//!   1 VALUE   ivarint value                            (required)
//!   2 SHARDS  uvarint n (2..=MAX_SHARDS), n x ivarint  (sum must equal VALUE)
//!   3 TOKENS  ivarint next sweep time, uvarint n (>= 1),
//!             n x (u64 LE fingerprint, ivarint expiry), fingerprints strictly increasing
//!   4 FLOOR   ivarint floor, uvarint n (= shard count), n x ivarint budget
//!             (each >= 0, summing to VALUE - floor; VALUE >= floor)
//!   5 LEDGER  like TOKENS, each entry followed by u8 outcome (0 refused, 1 granted) and,
//!             when granted, ivarint value
//!   6 HISTORY ivarint width, ivarint retention, ivarint retained_since, u8 has-watermark
//!             [+ ivarint watermark], ivarint last drift, uvarint total |drift|, uvarint
//!             reconciles, uvarint n (<= MAX_BUCKETS), n x (ivarint end, ivarint sum)
//!   7 INTENTS uvarint n (= LEDGER's entry count, 0 without one), n x uvarint intent
//!             (< 2^31), in LEDGER's order. Written whenever TOKENS or LEDGER is: its
//!             presence says TOKENS holds only `CTR.ADD key 1` tokens and every ledger entry
//!             has its intent. Without it (an older encoding), TOKENS entries become ledger
//!             entries matching any add or clear, and LEDGER entries match a decrement of any
//!             amount.
//!   (8-10 are reserved for other features)
//!  11 SPREAD  uvarint n (1..MAX_HOLDERS-1), n x (uvarint len, bytes) holder names 1..n, each
//!             in its own slot (the home key is holder 0)
//!  12 TRANSFER uvarint last seq, u8 sealed (0/1) [+ (uvarint len, bytes) home],
//!             uvarint n, n x (bytes receiver, uvarint seq (1..=last seq), ivarint dv,
//!             ivarint df) outbox by strictly increasing receiver,
//!             uvarint n, n x (bytes giver, uvarint seq >= 1) inbox by strictly increasing giver,
//!             uvarint n, n x bytes leaving holder (distinct). Written when any part is
//!             non-empty (see `crate::counter::transfer`).
//!             Read only: written by versions before giver and fold ids (section 16 replaced
//!             it); its folds get the fold id LEGACY_FOLD (matched by holder name), its
//!             senders' entries giver id 0 (matched by name).
//!  13 SPREAD_FLOOR ivarint floor F of a floored spread counter (needs SPREAD)
//!  (14 is reserved)
//!  15 SPREAD_ID u64 LE spread id (never 0; needs SPREAD). Written whenever SPREAD is and its
//!             id is not 0; without it (a spread made before ids) the id is 0.
//!  16 TRANSFER (giver and fold ids) u64 LE giver id, uvarint last seq,
//!             u8 sealed (0/1) [+ (uvarint len, bytes) home],
//!             uvarint n, n x (bytes receiver, uvarint seq (1..=last seq), ivarint dv,
//!             ivarint df, u64 LE fold id (0: a budget move), bytes giver's name at the debit
//!             (empty: its current name)) outbox by strictly increasing receiver,
//!             uvarint n, n x (u64 LE giver id, bytes giver name, uvarint seq >= 1) inbox by
//!             strictly increasing (id, name), a nonzero id at most once,
//!             uvarint n, n x (bytes leaving holder, u64 LE fold id >= 1) (distinct names
//!             and ids). Written when any part is non-empty (see `crate::counter::transfer`);
//!             never together with section 12.
//!  17 RETIRED uvarint n (1..=MAX_RETIRED), n x u64 LE spread id (nonzero, distinct), oldest
//!             first: spreads this home had and retired, all their folds applied (their
//!             givers' inbox entries dropped; `Transfers::retired`). Written when not empty;
//!             files without it retire nothing.
//!  18 FOLDED  uvarint n (1..=MAX_MARKS), n x (u64 LE spread id (nonzero), uvarint index (>= 1),
//!             uvarint attempt) by strictly increasing (spread id, index): holders of a spread
//!             this home still has (or has not retired yet) folded back here, by place, their
//!             inbox entries dropped (`Transfers::folded`, `crate::counter::folded`). Written
//!             when not empty; files without it mark nothing.
//!  19 CEILING ivarint ceiling, uvarint n (= shard count), n x ivarint budget
//!             (each >= 0, summing to ceiling - VALUE; VALUE <= ceiling; with SPREAD exactly
//!             when SPREAD_CEILING is there: a ceiled spread's home keeps its own share of the
//!             ceiling). Files without it have no ceiling.
//!  20 WINDOW  ivarint window ms, ivarint buckets n (window a multiple of n, 1..=4096),
//!             uvarint k (<= n), k x (ivarint bucket index, ivarint sum (not 0)), indices
//!             strictly increasing and spanning fewer than n, sums adding up to VALUE: a
//!             sliding window (`crate::counter::window`); never with HISTORY, SPREAD or
//!             TRANSFER.
//!  21 THROTTLE u8 parts (bit 0 arrival time, bit 1 replies, at least one, no other bit)
//!             [+ ivarint arrival time, unix ns] [+ ivarint next sweep, uvarint n (>= 1),
//!             n x (u64 LE fingerprint, ivarint expiry, u8 limited (0/1), ivarint limit,
//!             ivarint remaining, ivarint retry_after, ivarint reset_after, uvarint intent
//!             (< 2^31)), fingerprints strictly increasing]: a `CTR.THROTTLE` limiter
//!             (`crate::counter::throttle`). Written when the counter has one.
//!  22 RECORDS ivarint next sweep time, uvarint n (>= 1), n x (u64 LE fingerprint, ivarint
//!             expiry, uvarint intent, ivarint value), fingerprints strictly increasing: what
//!             tokened writes keep beside their ledger entry (`Counter::records`): the increment
//!             a CTR.INCREX applied (APPLIED), the units a grant took (GRANT, > 0) or a refund
//!             gave back (REFUNDED, >= 0). Files without it keep none.
//!  23 STRAY  (no body): a counter a client renamed onto a holder's name, which is not that
//!             holder (`Counter::is_stray`). Files without it hold none.
//!  24 LISTING ivarint known since, uvarint n (<= MAX_LISTED), n x (u64 LE spread id,
//!             (uvarint len, bytes) the home name its holders carry), uvarint n (<= MAX_LISTED),
//!             n x (u64 LE spread id, uvarint index (>= 1), uvarint attempt (< 2^32), ivarint
//!             listed at, u8 0 | 1 + ivarint unlisted at): a home's listing history, each
//!             holder by the parts of its name (`crate::counter::listing`). Written when the
//!             home has one;
//!             without it (a spread made by an earlier version) `CTR.HOLDERS key AT` answers
//!             that the list is not known.
//!  25 TRANSFER_CEILINGS uvarint n (= the outbox's entry count), n x ivarint dc: the ceiling
//!             units of each outbox entry of section 16 (or 12), in outbox order, not all 0.
//!             Written when some entry carries ceiling units (a ceiled spread's move or fold);
//!             without it (any encoding before ceilings) every entry carries none.
//!  26 SPREAD_CEILING ivarint ceiling C of a ceiled spread counter (needs SPREAD; its holders'
//!             names are ceiled ones, `crate::counter::spread::CEILED_ATTEMPTS`, and the home
//!             has a CEILING). Written when the spread is ceiled; files without it have none.
//! u8 0 (END); nothing may follow it
//! ```
//! The END tag makes every truncation detectable, even one that falls between sections.
//! A later feature adds a section with a new tag; files without it still decode. A reader
//! refuses a tag it does not know, a repeated or out-of-order tag, and any broken invariant.
//! A change to an existing section's body needs a new format number, and every old format keeps
//! its decode arm.

use super::codec::{decode_error, DecodeError, Reader, Writer};
use super::effect::{decode_throttle_reply, encode_throttle_reply};
use crate::counter::folded::{FoldedMark, MAX_MARKS};
use crate::counter::history::MAX_BUCKETS;
use crate::counter::listing::{Listed, Listing, MAX_LISTED};
use crate::counter::spread::{MAX_HOLDERS, MAX_HOLDER_NAME, MAX_HOME_NAME};
use crate::counter::throttle::{Throttle, ThrottleEntry};
use crate::counter::tokens::TokenEntry;
use crate::counter::transfer::{
    Applied, Leaving, Outgoing, Transfers, LEGACY_FOLD, MAX_ENTRIES, MAX_NAME, MAX_RETIRED,
};
use crate::counter::window::{check_config, Window, MAX_BUCKETS as MAX_WINDOW_BUCKETS};
use crate::counter::{
    Ceiling, Counter, CounterParts, Floor, History, Intent, LedgerEntry, Spread, TokenWindow,
    MAX_SHARDS,
};

pub const FORMAT_V1: u8 = 1;
pub const CURRENT_FORMAT: u8 = FORMAT_V1;

const TAG_END: u8 = 0;
const TAG_VALUE: u8 = 1;
const TAG_SHARDS: u8 = 2;
const TAG_TOKENS: u8 = 3;
const TAG_FLOOR: u8 = 4;
const TAG_LEDGER: u8 = 5;
const TAG_HISTORY: u8 = 6;
const TAG_INTENTS: u8 = 7;
const TAG_SPREAD: u8 = 11;
const TAG_TRANSFER: u8 = 12;
/// A floored spread counter's floor.
const TAG_SPREAD_FLOOR: u8 = 13;
/// A spread's id (14 is reserved).
const TAG_SPREAD_ID: u8 = 15;
const TAG_TRANSFER_IDS: u8 = 16;
const TAG_RETIRED: u8 = 17;
const TAG_FOLDED: u8 = 18;
const TAG_CEILING: u8 = 19;
const TAG_RECORDS: u8 = 22;
const TAG_WINDOW: u8 = 20;
const TAG_THROTTLE: u8 = 21;
const TAG_STRAY: u8 = 23;
/// A home's listing history (`crate::counter::listing`).
const TAG_LISTING: u8 = 24;
/// The ceiling units of the outbox's entries, when any carries some.
const TAG_TRANSFER_CEILINGS: u8 = 25;
/// A ceiled spread counter's ceiling (needs SPREAD, as TAG_SPREAD_FLOOR does).
const TAG_SPREAD_CEILING: u8 = 26;
const THROTTLE_TAT: u8 = 1;
const THROTTLE_REPLIES: u8 = 2;

pub fn encode(counter: &Counter) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(CURRENT_FORMAT);
    w.u8(TAG_VALUE).ivarint(counter.value());
    if counter.shard_count() > 1 {
        let shards = counter.shard_values();
        w.u8(TAG_SHARDS).uvarint(shards.len() as u64);
        for s in shards {
            w.ivarint(s);
        }
    }
    encode_window(&mut w, TAG_TOKENS, counter.tokens(), |_, _| {});
    if let Some(f) = counter.floor() {
        w.u8(TAG_FLOOR)
            .ivarint(f.floor)
            .uvarint(f.budgets.len() as u64);
        for b in &f.budgets {
            w.ivarint(*b);
        }
    }
    encode_window(&mut w, TAG_LEDGER, counter.ledger(), |w, e| {
        match e.outcome {
            None => {
                w.u8(0);
            }
            Some(v) => {
                w.u8(1).ivarint(v);
            }
        }
    });
    if let Some(h) = counter.history() {
        encode_history(&mut w, h);
    }
    if !counter.tokens().is_empty() || !counter.ledger().is_empty() {
        let entries = counter.ledger().entries();
        w.u8(TAG_INTENTS).uvarint(entries.len() as u64);
        for (_, e) in entries {
            w.uvarint(u64::from(e.intent.bits()));
        }
    }
    if let Some(s) = counter.spread() {
        w.u8(TAG_SPREAD).uvarint(s.holders.len() as u64);
        for name in &s.holders {
            w.bytes(name);
        }
    }
    if let Some(floor) = counter.spread().and_then(|s| s.floor) {
        w.u8(TAG_SPREAD_FLOOR).ivarint(floor);
    }
    if let Some(id) = counter.spread().map(|s| s.id).filter(|&id| id != 0) {
        w.u8(TAG_SPREAD_ID).fixed_u64(id);
    }
    if let Some(t) = counter.transfers() {
        encode_transfers(&mut w, t);
    }
    if let Some(c) = counter.ceiling() {
        w.u8(TAG_CEILING)
            .ivarint(c.ceiling)
            .uvarint(c.budgets.len() as u64);
        for b in &c.budgets {
            w.ivarint(*b);
        }
    }
    if let Some(win) = counter.window() {
        w.u8(TAG_WINDOW)
            .ivarint(win.width_ms)
            .ivarint(win.buckets)
            .uvarint(win.buckets_held().count() as u64);
        for (index, sum) in win.buckets_held() {
            w.ivarint(index).ivarint(sum);
        }
    }
    if let Some(t) = counter.throttle() {
        encode_throttle(&mut w, t);
    }
    encode_window(&mut w, TAG_RECORDS, counter.records(), |w, e| {
        w.uvarint(u64::from(e.intent.bits()))
            .ivarint(e.outcome.unwrap_or(0));
    });
    if counter.is_stray() {
        w.u8(TAG_STRAY);
    }
    if let Some(listing) = counter.transfers().and_then(|t| t.listing.as_ref()) {
        encode_listing(&mut w, listing);
    }
    if let Some(t) = counter.transfers() {
        encode_transfer_ceilings(&mut w, &t.outbox);
    }
    if let Some(ceiling) = counter.spread().and_then(|s| s.ceiling) {
        w.u8(TAG_SPREAD_CEILING).ivarint(ceiling);
    }
    w.u8(TAG_END);
    w.finish()
}

fn encode_throttle(w: &mut Writer, t: &Throttle) {
    let parts = if t.tat_ns.is_some() { THROTTLE_TAT } else { 0 }
        | if t.replies().is_empty() {
            0
        } else {
            THROTTLE_REPLIES
        };
    w.u8(TAG_THROTTLE).u8(parts);
    if let Some(tat) = t.tat_ns {
        w.ivarint(tat);
    }
    if !t.replies().is_empty() {
        w.ivarint(t.replies().next_sweep())
            .uvarint(t.replies().len() as u64);
        for (fp, e) in t.replies().entries() {
            w.fixed_u64(fp).ivarint(e.expires_at);
            encode_throttle_reply(w, &e.reply, e.intent);
        }
    }
}

fn decode_window_section(r: &mut Reader) -> Result<Window, DecodeError> {
    let width_ms = r.ivarint()?;
    let buckets = r.ivarint()?;
    if let Err(why) = check_config(width_ms, buckets) {
        return decode_error(format!("CTR window refused ({why})"));
    }
    // Each bucket takes at least 2 bytes; checked against `buckets` by Counter::from_parts.
    let n = r.count(MAX_WINDOW_BUCKETS as usize, 2)?;
    let held = (0..n)
        .map(|_| Ok((r.ivarint()?, r.ivarint()?)))
        .collect::<Result<Vec<_>, DecodeError>>()?;
    Window::from_buckets(width_ms, buckets, &held)
        .or_else(|e| decode_error(format!("CTR window refused ({e})")))
}

fn decode_throttle(r: &mut Reader) -> Result<Throttle, DecodeError> {
    let parts = r.u8()?;
    if parts == 0 || parts & !(THROTTLE_TAT | THROTTLE_REPLIES) != 0 {
        return decode_error(format!("CTR throttle section with parts {parts}"));
    }
    let tat_ns = if parts & THROTTLE_TAT != 0 {
        Some(r.ivarint()?)
    } else {
        None
    };
    let replies = if parts & THROTTLE_REPLIES != 0 {
        let (entries, next_sweep) = decode_window(r, decode_throttle_entry)?;
        window(entries, next_sweep)
    } else {
        TokenWindow::default()
    };
    Ok(Throttle::new(tat_ns, replies))
}

fn decode_throttle_entry(r: &mut Reader, expires_at: i64) -> Result<ThrottleEntry, DecodeError> {
    let (reply, intent) = decode_throttle_reply(r)?;
    Ok(ThrottleEntry {
        expires_at,
        reply,
        intent,
    })
}

fn encode_transfers(w: &mut Writer, t: &Transfers) {
    let retired = &t.retired;
    let rest = Transfers {
        retired: Vec::new(),
        folded: Vec::new(),
        listing: None,
        ..t.clone()
    };
    if !rest.is_empty() {
        encode_transfer_ids(w, t);
    }
    if !retired.is_empty() {
        w.u8(TAG_RETIRED).uvarint(retired.len() as u64);
        for id in retired {
            w.fixed_u64(*id);
        }
    }
    if !t.folded.is_empty() {
        w.u8(TAG_FOLDED).uvarint(t.folded.len() as u64);
        for m in &t.folded {
            w.fixed_u64(m.spread_id).uvarint(m.index).uvarint(m.attempt);
        }
    }
}

/// Section 16 (every part of the transfer state but the retired spreads and the marks).
fn encode_transfer_ids(w: &mut Writer, t: &Transfers) {
    w.u8(TAG_TRANSFER_IDS)
        .fixed_u64(t.giver_id)
        .uvarint(t.last_seq);
    match &t.sealed_into {
        Some(home) => w.u8(1).bytes(home),
        None => w.u8(0),
    };
    w.uvarint(t.outbox.len() as u64);
    for o in &t.outbox {
        w.bytes(&o.receiver)
            .uvarint(o.seq)
            .ivarint(o.dv)
            .ivarint(o.df)
            .fixed_u64(o.fold_id)
            .bytes(&o.from);
    }
    w.uvarint(t.inbox.len() as u64);
    for e in &t.inbox {
        w.fixed_u64(e.giver_id).bytes(&e.name).uvarint(e.seq);
    }
    w.uvarint(t.leaving.len() as u64);
    for l in &t.leaving {
        w.bytes(&l.name).fixed_u64(l.fold_id);
    }
}

/// Section 25, when some outbox entry carries ceiling units (so a state without any encodes
/// as it did before ceilings).
fn encode_transfer_ceilings(w: &mut Writer, outbox: &[Outgoing]) {
    if outbox.iter().all(|o| o.dc == 0) {
        return;
    }
    w.u8(TAG_TRANSFER_CEILINGS).uvarint(outbox.len() as u64);
    for o in outbox {
        w.ivarint(o.dc);
    }
}

/// Section 25 into the outbox decoded before it (every transfer section comes first).
fn decode_transfer_ceilings(r: &mut Reader, outbox: &mut [Outgoing]) -> Result<(), DecodeError> {
    // Each dc takes at least 1 byte.
    let n = r.count(MAX_ENTRIES, 1)?;
    if n != outbox.len() {
        return decode_error("CTR transfer ceilings do not match the outbox");
    }
    for o in outbox.iter_mut() {
        o.dc = r.ivarint()?;
    }
    if outbox.iter().all(|o| o.dc == 0) {
        return decode_error("CTR transfer ceilings section with no ceiling units");
    }
    Ok(())
}

/// Section 12 (before ids) or 16: the same layout but for the ids 16 adds.
fn decode_transfers(r: &mut Reader, with_ids: bool) -> Result<Transfers, DecodeError> {
    let id = |r: &mut Reader| if with_ids { r.fixed_u64() } else { Ok(0) };
    let giver_id = id(r)?;
    let last_seq = r.uvarint()?;
    let sealed_into = match r.u8()? {
        0 => None,
        1 => Some(r.bytes(MAX_NAME)?.to_vec()),
        other => return decode_error(format!("unknown sealed flag {other}")),
    };
    // Each outbox entry takes at least 5 bytes, each inbox entry 3, each name 2.
    let n = r.count(MAX_ENTRIES, 5)?;
    let outbox = (0..n)
        .map(|_| {
            let receiver = r.bytes(MAX_NAME)?.to_vec();
            let (seq, dv, df) = (r.uvarint()?, r.ivarint()?, r.ivarint()?);
            let (fold_id, from) = match with_ids {
                true => (r.fixed_u64()?, r.bytes(MAX_NAME)?.to_vec()),
                // Before ids a sealed holder's entry to its home was its fold.
                false if sealed_into.as_ref() == Some(&receiver) => (LEGACY_FOLD, Vec::new()),
                false => (0, Vec::new()),
            };
            Ok(Outgoing {
                receiver,
                seq,
                dv,
                df,
                dc: 0,
                fold_id,
                from,
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let n = r.count(MAX_ENTRIES, 3)?;
    let inbox = (0..n)
        .map(|_| {
            Ok(Applied {
                giver_id: id(r)?,
                name: r.bytes(MAX_NAME)?.to_vec(),
                seq: r.uvarint()?,
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let n = r.count(MAX_HOLDERS, 2)?;
    let leaving = (0..n)
        .map(|_| {
            let name = r.bytes(MAX_NAME)?.to_vec();
            let fold_id = if with_ids {
                r.fixed_u64()?
            } else {
                LEGACY_FOLD
            };
            Ok(Leaving { name, fold_id })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let t = Transfers {
        giver_id,
        last_seq,
        outbox,
        inbox,
        sealed_into,
        leaving,
        retired: Vec::new(),
        folded: Vec::new(),
        listing: None,
    };
    if t.is_empty() {
        return decode_error("CTR transfer section with nothing in it");
    }
    // Order, uniqueness and seqs are checked by Counter::from_parts.
    Ok(t)
}

/// Section 18: order, ids and what the marks cover are checked by Counter::from_parts.
fn decode_folded(r: &mut Reader) -> Result<Vec<FoldedMark>, DecodeError> {
    let n = r.count(MAX_MARKS, 10)?;
    if n == 0 {
        return decode_error("CTR folded section with nothing in it");
    }
    (0..n)
        .map(|_| {
            Ok(FoldedMark {
                spread_id: r.fixed_u64()?,
                index: r.uvarint()?,
                attempt: r.uvarint()?,
            })
        })
        .collect()
}

fn encode_listing(w: &mut Writer, l: &Listing) {
    w.u8(TAG_LISTING)
        .ivarint(l.known_since)
        .uvarint(l.homes.len() as u64);
    for (id, home) in &l.homes {
        w.fixed_u64(*id).bytes(home);
    }
    w.uvarint(l.entries.len() as u64);
    for e in &l.entries {
        w.fixed_u64(e.spread_id)
            .uvarint(u64::from(e.index))
            .uvarint(u64::from(e.attempt))
            .ivarint(e.listed_at);
        match e.unlisted_at {
            Some(end) => w.u8(1).ivarint(end),
            None => w.u8(0),
        };
    }
}

/// Section 24; its invariants are checked with the transfer state's (`Transfers::validate`).
fn decode_listing(r: &mut Reader) -> Result<Listing, DecodeError> {
    let known_since = r.ivarint()?;
    let n = r.count(MAX_LISTED, 9)?;
    let homes = (0..n)
        .map(|_| Ok((r.fixed_u64()?, r.bytes(MAX_HOME_NAME)?.to_vec())))
        .collect::<Result<Vec<_>, DecodeError>>()?;
    let n = r.count(MAX_LISTED, 12)?;
    let small =
        |v: u64| u32::try_from(v).or_else(|_| decode_error("a listed holder's index or attempt"));
    let entries = (0..n)
        .map(|_| {
            let spread_id = r.fixed_u64()?;
            let index = small(r.uvarint()?)?;
            let attempt = small(r.uvarint()?)?;
            let listed_at = r.ivarint()?;
            let unlisted_at = match r.u8()? {
                0 => None,
                1 => Some(r.ivarint()?),
                _ => return decode_error("a listed holder's end flag is not 0 or 1"),
            };
            Ok(Listed {
                spread_id,
                index,
                attempt,
                listed_at,
                unlisted_at,
            })
        })
        .collect::<Result<Vec<_>, DecodeError>>()?;
    Ok(Listing {
        known_since,
        homes,
        entries,
    })
}

fn encode_history(w: &mut Writer, h: &History) {
    w.u8(TAG_HISTORY)
        .ivarint(h.width)
        .ivarint(h.retention)
        .ivarint(h.retained_since);
    match h.watermark {
        Some(wm) => w.u8(1).ivarint(wm),
        None => w.u8(0),
    };
    w.ivarint(h.last_drift)
        .uvarint(h.total_abs_drift)
        .uvarint(h.reconciles)
        .uvarint(h.buckets.len() as u64);
    for (end, sum) in &h.buckets {
        w.ivarint(*end).ivarint(*sum);
    }
}

/// A token section: next sweep time, count, then per entry the fingerprint, the expiry and
/// `extra`, in fingerprint order.
fn encode_window<E: TokenEntry>(
    w: &mut Writer,
    tag: u8,
    window: &TokenWindow<E>,
    extra: impl Fn(&mut Writer, &E),
) {
    if window.is_empty() {
        return;
    }
    w.u8(tag)
        .ivarint(window.next_sweep())
        .uvarint(window.len() as u64);
    for (fp, entry) in window.entries() {
        w.fixed_u64(fp).ivarint(entry.expires_at());
        extra(w, &entry);
    }
}

pub fn decode(buf: &[u8]) -> Result<Counter, DecodeError> {
    let mut r = Reader::new(buf);
    match r.u8()? {
        FORMAT_V1 => decode_v1(&mut r),
        other => decode_error(format!("unknown CTR encoding format {other}")),
    }
}

fn decode_v1(r: &mut Reader) -> Result<Counter, DecodeError> {
    let mut value = None;
    let mut shards = Vec::new();
    let mut tokens = None;
    let mut floor = None;
    let mut ceiling = None;
    let mut records = None;
    let mut ledger = None;
    let mut history = None;
    let mut spread: Option<Spread> = None;
    let mut spread_floor = None;
    let mut spread_ceiling = None;
    let mut spread_id = None;
    let mut transfers = None;
    let mut intents = None;
    let mut throttle = None;
    let mut window_state = None;
    let mut stray = false;
    let mut last_tag = 0u8;
    loop {
        let tag = r.u8()?;
        if tag == TAG_END {
            break;
        }
        if tag <= last_tag {
            return decode_error(format!("section {tag} repeated or out of order"));
        }
        last_tag = tag;
        match tag {
            TAG_VALUE => value = Some(r.ivarint()?),
            TAG_SHARDS => shards = decode_shards(r)?,
            TAG_TOKENS => tokens = Some(decode_window(r, |_, expires| Ok(expires))?),
            TAG_FLOOR => floor = Some(decode_floor(r)?),
            TAG_LEDGER => ledger = Some(decode_window(r, decode_ledger_entry)?),
            TAG_HISTORY => history = Some(decode_history(r)?),
            TAG_INTENTS => intents = Some(decode_intents(r)?),
            TAG_SPREAD => spread = Some(decode_spread(r)?),
            TAG_TRANSFER => transfers = Some(decode_transfers(r, false)?),
            TAG_SPREAD_FLOOR => spread_floor = Some(r.ivarint()?),
            TAG_SPREAD_ID => spread_id = Some(r.fixed_u64()?),
            TAG_TRANSFER_IDS if transfers.is_some() => {
                return decode_error("two CTR transfer sections")
            }
            TAG_TRANSFER_IDS => transfers = Some(decode_transfers(r, true)?),
            TAG_RETIRED => {
                let n = r.count(MAX_RETIRED, 8)?;
                if n == 0 {
                    return decode_error("CTR retired section with nothing in it");
                }
                let ids = (0..n)
                    .map(|_| r.fixed_u64())
                    .collect::<Result<Vec<_>, DecodeError>>()?;
                // Zero and repeated ids are refused by Counter::from_parts.
                transfers.get_or_insert_with(Transfers::default).retired = ids;
            }
            TAG_FOLDED => {
                transfers.get_or_insert_with(Transfers::default).folded = decode_folded(r)?;
            }
            TAG_CEILING => {
                // The same body as a floor's: a limit and one budget per shard.
                let Floor { floor, budgets } = decode_floor(r)?;
                ceiling = Some(Ceiling {
                    ceiling: floor,
                    budgets,
                });
            }
            TAG_RECORDS => records = Some(decode_window(r, decode_record)?),
            TAG_WINDOW => window_state = Some(decode_window_section(r)?),
            TAG_THROTTLE => throttle = Some(decode_throttle(r)?),
            TAG_STRAY => stray = true,
            TAG_LISTING => {
                transfers.get_or_insert_with(Transfers::default).listing = Some(decode_listing(r)?);
            }
            TAG_TRANSFER_CEILINGS => {
                // Without a transfer section the outbox is empty, which no such section matches.
                let outbox = transfers
                    .as_mut()
                    .map_or(&mut [][..], |t| &mut t.outbox[..]);
                decode_transfer_ceilings(r, outbox)?;
            }
            TAG_SPREAD_CEILING => spread_ceiling = Some(r.ivarint()?),
            other => return decode_error(format!("unknown CTR section {other}")),
        }
    }
    if !r.is_empty() {
        return decode_error("trailing bytes after the CTR end marker");
    }
    let Some(value) = value else {
        return decode_error("CTR value section missing");
    };
    if shards.is_empty() {
        shards.push(value);
    }
    if let Some(floor) = spread_floor {
        spread_part(&mut spread, "floor")?.floor = Some(floor);
    }
    if let Some(ceiling) = spread_ceiling {
        spread_part(&mut spread, "ceiling")?.ceiling = Some(ceiling);
    }
    if let Some(id) = spread_id {
        let s = spread_part(&mut spread, "id")?;
        // 0 is never written: it is what a spread without this section has.
        if id == 0 {
            return decode_error("a spread id of 0 written out");
        }
        s.id = id;
    }
    let (tokens, ledger) = token_windows(tokens, ledger, intents)?;
    let parts = CounterParts {
        shards,
        floor,
        ceiling,
        tokens,
        ledger,
        records: records.map_or_else(TokenWindow::default, |(entries, next_sweep)| {
            window(entries, next_sweep)
        }),
        history,
        spread,
        transfers,
        throttle,
        window: window_state,
        stray,
    };
    let counter = Counter::from_parts(parts)
        .or_else(|e| decode_error(format!("CTR state is inconsistent: {e}")))?;
    if counter.value() != value {
        return decode_error("CTR shards do not sum to the value");
    }
    Ok(counter)
}

/// The spread a section of its own (`what`: its floor, ceiling or id) belongs to, which the
/// holders' section must have given.
fn spread_part<'s>(
    spread: &'s mut Option<Spread>,
    what: &str,
) -> Result<&'s mut Spread, DecodeError> {
    match spread.as_mut() {
        Some(s) => Ok(s),
        None => decode_error(format!("a spread {what} without holders")),
    }
}

/// A decoded token section: its entries in fingerprint order and its next sweep time.
type Section<E> = (Vec<(u64, E)>, i64);

/// Builds both windows from their sections and the intents (see INTENTS in the module docs).
fn token_windows(
    tokens: Option<Section<i64>>,
    ledger: Option<Section<LedgerEntry>>,
    intents: Option<Vec<Intent>>,
) -> Result<(TokenWindow, TokenWindow<LedgerEntry>), DecodeError> {
    if intents.is_some() && tokens.is_none() && ledger.is_none() {
        return decode_error("CTR intents without tokens");
    }
    let (mut ledger_entries, ledger_sweep) = ledger.unwrap_or_default();
    let Some(intents) = intents else {
        // An encoding from before intents: its add tokens may name any add or clear.
        let Some((legacy, tokens_sweep)) = tokens else {
            return Ok((TokenWindow::default(), window(ledger_entries, ledger_sweep)));
        };
        let next_sweep = if ledger_entries.is_empty() {
            tokens_sweep
        } else {
            ledger_sweep.min(tokens_sweep)
        };
        ledger_entries.extend(legacy.into_iter().map(|(fp, expires_at)| {
            let entry = LedgerEntry {
                expires_at,
                outcome: Some(0),
                intent: Intent::LEGACY_ADD_OR_CLEAR,
            };
            (fp, entry)
        }));
        ledger_entries.sort_unstable_by_key(|(fp, _)| *fp);
        if ledger_entries.windows(2).any(|p| p[0].0 == p[1].0) {
            return decode_error("CTR token in both the tokens and the ledger");
        }
        return Ok((TokenWindow::default(), window(ledger_entries, next_sweep)));
    };
    if intents.len() != ledger_entries.len() {
        return decode_error("CTR intents do not match the ledger");
    }
    for ((_, e), intent) in ledger_entries.iter_mut().zip(intents) {
        e.intent = intent;
    }
    let (token_entries, tokens_sweep) = tokens.unwrap_or_default();
    Ok((
        window(token_entries, tokens_sweep),
        window(ledger_entries, ledger_sweep),
    ))
}

fn window<E: TokenEntry>(entries: Vec<(u64, E)>, next_sweep: i64) -> TokenWindow<E> {
    if entries.is_empty() {
        TokenWindow::default()
    } else {
        TokenWindow::from_parts(entries, next_sweep)
    }
}

fn decode_intents(r: &mut Reader) -> Result<Vec<Intent>, DecodeError> {
    let n = r.count(usize::MAX, 1)?;
    (0..n)
        .map(|_| {
            let bits = u32::try_from(r.uvarint()?).ok().and_then(Intent::from_bits);
            bits.map_or_else(|| decode_error("CTR intent out of range"), Ok)
        })
        .collect()
}

fn decode_shards(r: &mut Reader) -> Result<Vec<i64>, DecodeError> {
    let n = r.count(MAX_SHARDS, 1)?;
    if n < 2 {
        return decode_error("CTR shard section with fewer than 2 shards");
    }
    (0..n).map(|_| r.ivarint()).collect()
}

/// A token section; `entry` reads what follows each fingerprint and expiry.
fn decode_window<E: TokenEntry>(
    r: &mut Reader,
    entry: impl Fn(&mut Reader, i64) -> Result<E, DecodeError>,
) -> Result<Section<E>, DecodeError> {
    let next_sweep = r.ivarint()?;
    // Each entry takes at least 9 bytes (8-byte fingerprint + 1-byte expiry).
    let n = r.count(usize::MAX, 9)?;
    if n == 0 {
        return decode_error("CTR token section with no tokens");
    }
    let mut entries = Vec::with_capacity(n);
    let mut previous: Option<u64> = None;
    for _ in 0..n {
        let fp = r.fixed_u64()?;
        let expires = r.ivarint()?;
        if previous.is_some_and(|p| fp <= p) {
            return decode_error("CTR tokens repeated or out of order");
        }
        previous = Some(fp);
        entries.push((fp, entry(r, expires)?));
    }
    Ok((entries, next_sweep))
}

fn decode_ledger_entry(r: &mut Reader, expires_at: i64) -> Result<LedgerEntry, DecodeError> {
    let outcome = match r.u8()? {
        0 => None,
        1 => Some(r.ivarint()?),
        other => return decode_error(format!("unknown ledger outcome {other}")),
    };
    // The intent comes from the INTENTS section; without one, any decrement.
    Ok(LedgerEntry {
        expires_at,
        outcome,
        intent: Intent::LEGACY_DECREMENT,
    })
}

/// One entry of the RECORDS section: an intent among the three records, and its value.
fn decode_record(r: &mut Reader, expires_at: i64) -> Result<LedgerEntry, DecodeError> {
    let bits = u32::try_from(r.uvarint()?).ok();
    let intent = bits.and_then(Intent::from_bits);
    let value = r.ivarint()?;
    let valid = match intent {
        Some(Intent::APPLIED) => true,
        Some(Intent::GRANT) => value > 0,
        Some(Intent::REFUNDED) => value >= 0,
        _ => return decode_error("unknown CTR record"),
    };
    if !valid {
        return decode_error("a CTR record's value out of range");
    }
    Ok(LedgerEntry {
        expires_at,
        outcome: Some(value),
        intent: intent.unwrap_or(Intent::APPLIED),
    })
}

fn decode_history(r: &mut Reader) -> Result<History, DecodeError> {
    let width = r.ivarint()?;
    let retention = r.ivarint()?;
    let retained_since = r.ivarint()?;
    let watermark = match r.u8()? {
        0 => None,
        1 => Some(r.ivarint()?),
        other => return decode_error(format!("unknown watermark flag {other}")),
    };
    let last_drift = r.ivarint()?;
    let total_abs_drift = r.uvarint()?;
    let reconciles = r.uvarint()?;
    let n = r.count(MAX_BUCKETS, 2)?;
    let buckets = (0..n)
        .map(|_| Ok((r.ivarint()?, r.ivarint()?)))
        .collect::<Result<Vec<_>, DecodeError>>()?;
    // Widths, alignment, order and sums are checked by Counter::from_parts.
    Ok(History {
        width,
        retention,
        retained_since,
        buckets,
        watermark,
        last_drift,
        total_abs_drift,
        reconciles,
    })
}

fn decode_spread(r: &mut Reader) -> Result<Spread, DecodeError> {
    // Each name takes at least 2 bytes (length and one byte).
    let n = r.count(MAX_HOLDERS - 1, 2)?;
    let holders = (0..n)
        .map(|_| r.bytes(MAX_HOLDER_NAME).map(<[u8]>::to_vec))
        .collect::<Result<Vec<_>, _>>()?;
    // Count, name lengths and distinct slots are checked by Counter::from_parts.
    Ok(Spread::of(holders))
}

fn decode_floor(r: &mut Reader) -> Result<Floor, DecodeError> {
    let floor = r.ivarint()?;
    let n = r.count(MAX_SHARDS, 1)?;
    let budgets = (0..n).map(|_| r.ivarint()).collect::<Result<Vec<_>, _>>()?;
    // Counts, signs and the sum are checked against the shards by Counter::from_parts.
    Ok(Floor { floor, budgets })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_a_window_and_refuse_broken_ones() {
        use crate::counter::{AddOp, WindowOp};
        let mut c = Counter::plain(4);
        c.apply_window(&WindowOp {
            now: 1000,
            config: Some((60_000, 6)),
        })
        .unwrap();
        for (now, delta) in [(11_000, 3), (25_000, -1), (71_500, 2)] {
            let op = AddOp {
                now,
                event: now,
                delta,
                shard: 0,
                shards: 1,
                token: None,
            };
            c.apply_add(&op).unwrap();
        }
        assert_eq!(
            c.value(),
            1,
            "at 71.5 s only the -1 and the 2 are in the window"
        );
        let bytes = encode(&c);
        assert_eq!(decode(&bytes).unwrap(), c);
        let section = |live: &[(i64, i64)], value: i64| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(value);
            w.u8(TAG_WINDOW).ivarint(60_000).ivarint(6);
            w.uvarint(live.len() as u64);
            for (i, s) in live {
                w.ivarint(*i).ivarint(*s);
            }
            w.u8(TAG_END);
            w.finish()
        };
        assert!(decode(&section(&[(1, 2), (3, 5)], 7)).is_ok());
        assert!(decode(&section(&[(1, 2), (3, 5)], 8)).is_err(), "sum");
        assert!(decode(&section(&[(3, 2), (1, 5)], 7)).is_err(), "order");
        assert!(decode(&section(&[(1, 2), (7, 5)], 7)).is_err(), "span");
        assert!(decode(&section(&[(1, 0)], 0)).is_err(), "an empty bucket");
    }

    #[test]
    fn roundtrip_a_throttle_and_refuse_broken_ones() {
        use crate::counter::throttle::ThrottleReply;
        use crate::counter::{ThrottleOp, TokenStamp};
        let mut c = Counter::default();
        let reply = ThrottleReply {
            limited: true,
            limit: 6,
            remaining: 0,
            retry_after: 3,
            reset_after: -1,
        };
        c.apply_throttle(&ThrottleOp {
            now: 1,
            tat_ns: Some(123_456_789),
            token: Some(TokenStamp {
                fp: 42,
                expires_at: 5000,
            }),
            reply,
            intent: 0x7fff_ffff,
        });
        let bytes = encode(&c);
        let back = decode(&bytes).unwrap();
        assert_eq!(back, c);
        assert_eq!(
            back.throttle().unwrap().retry(42, 0x7fff_ffff, 2),
            crate::counter::ThrottleRetry::Replay(reply)
        );
        let end = bytes.len() - 1;
        // The parts byte follows the tag: none, and an unknown bit, are refused.
        let at = 3; // format, VALUE 0, then this section
        assert_eq!(bytes[at], TAG_THROTTLE);
        for parts in [0u8, 4] {
            let mut broken = bytes.clone();
            broken[at + 1] = parts;
            assert!(decode(&broken).is_err(), "parts {parts}");
        }
        assert!(decode(&bytes[..end]).is_err(), "truncated");
    }

    #[test]
    fn roundtrip_plain_and_sharded() {
        for c in [
            Counter::plain(0),
            Counter::plain(i64::MIN),
            Counter::plain(i64::MAX),
            Counter::from_shards(vec![5, -3, 9, 0]).unwrap(),
        ] {
            assert_eq!(decode(&encode(&c)).unwrap(), c);
        }
    }

    #[test]
    fn roundtrip_a_stray_and_its_unmarking() {
        let mut c = Counter::from_shards(vec![-600, -400]).unwrap();
        c.set_stray(true);
        let bytes = encode(&c);
        assert_eq!(bytes[bytes.len() - 2..], [TAG_STRAY, TAG_END]);
        let back = decode(&bytes).unwrap();
        assert!(back.is_stray());
        assert_eq!(back, c);
        // Unmarked, it is the counter it was, byte for byte (no empty extras left behind).
        let mut plain = Counter::plain(-1000);
        plain.set_stray(true);
        plain.set_stray(false);
        assert_eq!(encode(&plain), encode(&Counter::plain(-1000)));
        // A stray with nothing else: the value and the mark.
        let mut bare = Counter::plain(5);
        bare.set_stray(true);
        assert_eq!(
            encode(&bare),
            vec![FORMAT_V1, TAG_VALUE, 10, TAG_STRAY, TAG_END]
        );
    }

    #[test]
    fn plain_counter_is_tiny() {
        assert_eq!(
            encode(&Counter::plain(5)),
            vec![FORMAT_V1, TAG_VALUE, 10, TAG_END]
        );
    }

    #[test]
    fn refuses_unknown_format_and_sections() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[2, TAG_VALUE, 0, TAG_END]).is_err());
        assert!(decode(&[FORMAT_V1, 9, 0, TAG_END]).is_err());
        assert!(decode(&[FORMAT_V1, TAG_END]).is_err(), "value is required");
        assert!(
            decode(&[FORMAT_V1, TAG_VALUE, 0, TAG_END, 0]).is_err(),
            "trailing"
        );
    }

    #[test]
    fn refuses_repeated_or_unordered_sections() {
        assert!(decode(&[FORMAT_V1, TAG_VALUE, 2, TAG_VALUE, 2, TAG_END]).is_err());
        assert!(decode(&[FORMAT_V1, TAG_SHARDS, 2, 2, 2, TAG_VALUE, 4, TAG_END]).is_err());
    }

    #[test]
    fn refuses_broken_shard_invariants() {
        // shards 1 + 1 = 2 but value says 3 (zigzag 6)
        assert!(decode(&[FORMAT_V1, TAG_VALUE, 6, TAG_SHARDS, 2, 2, 2, TAG_END]).is_err());
        assert!(decode(&[FORMAT_V1, TAG_VALUE, 4, TAG_SHARDS, 2, 2, 2, TAG_END]).is_ok());
        // a single shard section is not canonical
        assert!(decode(&[FORMAT_V1, TAG_VALUE, 2, TAG_SHARDS, 1, 2, TAG_END]).is_err());
        // huge shard count
        let mut w = Writer::new();
        w.u8(FORMAT_V1)
            .u8(TAG_VALUE)
            .ivarint(0)
            .u8(TAG_SHARDS)
            .uvarint(1 << 40);
        assert!(decode(&w.finish()).is_err());
        // shards that overflow when summed
        let mut w = Writer::new();
        w.u8(FORMAT_V1)
            .u8(TAG_VALUE)
            .ivarint(0)
            .u8(TAG_SHARDS)
            .uvarint(2);
        w.ivarint(i64::MAX).ivarint(1).u8(TAG_END);
        assert!(decode(&w.finish()).is_err());
    }

    fn with_tokens() -> Counter {
        use crate::counter::{AddOp, DecrOp, TokenStamp};
        let mut c = Counter::from_shards(vec![1, 2]).unwrap();
        c.set_floor(Some(-5)).unwrap();
        for (fp, amount) in [(77u64, 2i64), (78, 1_000)] {
            c.apply_decrement(&DecrOp {
                now: 10,
                event: 10,
                amount,
                shard: 1,
                shards: 2,
                token: Some(TokenStamp {
                    fp,
                    expires_at: 900,
                }),
            })
            .unwrap();
        }
        for (i, fp) in [9u64, 3, u64::MAX, 0].into_iter().enumerate() {
            c.apply_add(&AddOp {
                now: 10,
                event: 10,
                delta: 1,
                shard: i % 2,
                shards: 2,
                token: Some(TokenStamp {
                    fp,
                    expires_at: 1_000 + i as i64,
                }),
            })
            .unwrap();
        }
        c
    }

    #[test]
    fn roundtrip_with_tokens() {
        let c = with_tokens();
        let back = decode(&encode(&c)).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.tokens().next_sweep(), c.tokens().next_sweep());
        use crate::counter::{TokenUse, WriteKind};
        assert_eq!(
            back.token_use(u64::MAX, WriteKind::Add(1), 1_001),
            TokenUse::Retry(Some(back.value()))
        );
        assert_eq!(
            back.token_use(77, WriteKind::Decr(2), 10),
            TokenUse::Retry(Some(1))
        );
        assert_eq!(
            back.token_use(78, WriteKind::Decr(1_000), 10),
            TokenUse::Retry(None)
        );
        assert_eq!(
            back.token_use(78, WriteKind::Decr(9), 10),
            TokenUse::Conflict
        );
        assert_eq!(back.floor().map(|f| f.floor), Some(-5));
    }

    #[test]
    fn roundtrip_with_history_and_refusal_of_broken_ones() {
        use crate::counter::{AddOp, ReconcileOp};
        let mut c = Counter::plain(7);
        let op = |watermark| ReconcileOp {
            now: 120_000,
            truth: 5,
            watermark,
            width: 60_000,
            retention: 3_600_000,
        };
        c.apply_reconcile(&op(None)).unwrap();
        for event in [130_000, 190_000, 250_000] {
            let add = AddOp {
                now: 260_000,
                event,
                delta: 2,
                shard: 0,
                shards: 1,
                token: None,
            };
            c.apply_add(&add).unwrap();
        }
        let back = decode(&encode(&c)).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.history().unwrap().buckets.len(), 3);
        let mut h = c.history().unwrap().clone();
        h.buckets.swap(0, 1);
        let broken = Counter::from_parts(CounterParts {
            shards: vec![c.value()],
            history: Some(h),
            ..CounterParts::default()
        });
        assert!(broken.is_err(), "unordered buckets");
        let mut h = c.history().unwrap().clone();
        h.width = 0;
        assert!(Counter::from_parts(CounterParts {
            shards: vec![1],
            history: Some(h),
            ..CounterParts::default()
        })
        .is_err());
    }

    #[test]
    fn refuses_floors_that_break_the_invariants() {
        let floored = |value: i64, floor: i64, budgets: &[i64]| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(value);
            w.u8(TAG_FLOOR).ivarint(floor).uvarint(budgets.len() as u64);
            for b in budgets {
                w.ivarint(*b);
            }
            w.u8(TAG_END);
            decode(&w.finish())
        };
        assert!(floored(10, 4, &[6]).is_ok());
        assert!(
            floored(10, 4, &[5]).is_err(),
            "budgets short of the headroom"
        );
        assert!(floored(10, 4, &[7]).is_err(), "budgets beyond the headroom");
        assert!(floored(3, 4, &[-1]).is_err(), "value below the floor");
        assert!(
            floored(10, 4, &[8, -2]).is_err(),
            "budget count differs from shards"
        );
        assert!(floored(10, 4, &[]).is_err());
        assert!(floored(i64::MAX, -1, &[0]).is_err(), "headroom overflows");
    }

    #[test]
    fn ceilings_roundtrip_and_broken_ones_are_refused() {
        let mut c = Counter::from_shards(vec![3, 4]).unwrap();
        c.set_floor(Some(-2)).unwrap();
        c.set_ceiling(Some(20)).unwrap();
        let back = decode(&encode(&c)).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.ceiling().unwrap().budgets, vec![7, 6]);
        let ceiled = |value: i64, ceiling: i64, budgets: &[i64]| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(value);
            w.u8(TAG_CEILING)
                .ivarint(ceiling)
                .uvarint(budgets.len() as u64);
            for b in budgets {
                w.ivarint(*b);
            }
            w.u8(TAG_END);
            decode(&w.finish())
        };
        assert!(ceiled(4, 10, &[6]).is_ok());
        assert!(
            ceiled(4, 10, &[5]).is_err(),
            "budgets short of the headroom"
        );
        assert!(ceiled(11, 10, &[-1]).is_err(), "value above the ceiling");
        assert!(ceiled(4, 10, &[8, -2]).is_err(), "budget count");
        assert!(ceiled(i64::MIN, 1, &[0]).is_err(), "headroom overflows");
        // A ceiling on a spread home is refused, whichever way it comes.
        let mut home = spread_counter();
        assert!(home.set_ceiling(Some(100)).is_err());
        let mut bytes = encode(&home);
        bytes.pop(); // END
        let mut w = Writer::new();
        w.u8(TAG_CEILING)
            .ivarint(100)
            .uvarint(1)
            .ivarint(100 - home.value());
        w.u8(TAG_END);
        bytes.extend(w.finish());
        assert!(decode(&bytes).is_err());
        home.set_ceiling(None).unwrap();
    }

    #[test]
    fn refuses_unordered_or_empty_token_sections() {
        let mut w = Writer::new();
        w.u8(FORMAT_V1)
            .u8(TAG_VALUE)
            .ivarint(0)
            .u8(TAG_TOKENS)
            .uvarint(0)
            .uvarint(2);
        w.fixed_u64(5)
            .ivarint(1)
            .fixed_u64(5)
            .ivarint(1)
            .u8(TAG_END);
        assert!(decode(&w.finish()).is_err(), "duplicate fingerprint");
        let mut w = Writer::new();
        w.u8(FORMAT_V1)
            .u8(TAG_VALUE)
            .ivarint(0)
            .u8(TAG_TOKENS)
            .uvarint(0)
            .uvarint(0)
            .u8(TAG_END);
        assert!(decode(&w.finish()).is_err(), "empty section");
        let mut w = Writer::new();
        w.u8(FORMAT_V1)
            .u8(TAG_VALUE)
            .ivarint(0)
            .u8(TAG_TOKENS)
            .uvarint(0)
            .uvarint(1 << 30);
        assert!(decode(&w.finish()).is_err(), "count beyond the payload");
    }

    /// A reconcile stamped at either end of the time range (a forged or replayed CTR.APPLY)
    /// leaves a history whose encoding still decodes: bucket bounds stay aligned.
    #[test]
    fn reconciles_at_the_edges_of_time_leave_a_loadable_state() {
        use crate::counter::{AddOp, ReconcileOp};
        for now in [i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1] {
            for width in [1, 60_000, 7, i64::MAX] {
                let mut c = Counter::plain(3);
                let op = ReconcileOp {
                    now,
                    truth: 1,
                    watermark: None,
                    width,
                    retention: 1,
                };
                c.apply_reconcile(&op).unwrap();
                assert_eq!(
                    decode(&encode(&c)),
                    Ok(c.clone()),
                    "now {now} width {width}"
                );
                let add = AddOp {
                    now,
                    event: now,
                    delta: 1,
                    shard: 0,
                    shards: 1,
                    token: None,
                };
                if c.apply_add(&add).is_ok() {
                    assert_eq!(
                        decode(&encode(&c)),
                        Ok(c.clone()),
                        "add at {now} width {width}"
                    );
                }
            }
        }
    }

    /// Shards whose partial sums leave the i64 range while their total fits are a valid
    /// counter (writes produce them: a reconcile credits shard 0 with the whole repair).
    #[test]
    fn shards_are_summed_exactly_whatever_their_order() {
        use crate::counter::ReconcileOp;
        let c = Counter::from_shards(vec![i64::MAX, 1, -2]).unwrap();
        assert_eq!(c.value(), i64::MAX - 1);
        assert_eq!(decode(&encode(&c)), Ok(c));
        let mut c = Counter::from_shards(vec![300, -70_000, 12, i64::MAX, 0, -5]).unwrap();
        let op = ReconcileOp {
            now: 1_700_000_000_000,
            truth: 0,
            watermark: None,
            width: 60_000,
            retention: 3_600_000,
        };
        c.apply_reconcile(&op).unwrap();
        assert_eq!(c.value(), 0);
        assert_eq!(decode(&encode(&c)), Ok(c));
        assert!(
            Counter::from_shards(vec![i64::MAX, 1]).is_err(),
            "total overflows"
        );
    }

    fn spread_counter() -> Counter {
        let mut c = Counter::from_shards(vec![4, 5]).unwrap();
        let holders = crate::counter::spread::plan_holders(
            b"{tag}home",
            0,
            &[],
            5,
            &crate::counter::spread::Standalone,
        )
        .unwrap();
        c.set_spread(Spread::of(holders)).unwrap();
        c
    }

    #[test]
    fn roundtrip_with_spread_and_refusal_of_broken_ones() {
        let c = spread_counter();
        let back = decode(&encode(&c)).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.spread().unwrap().count(), 5);
        let full = encode(&c);
        for len in 0..full.len() {
            assert!(decode(&full[..len]).is_err(), "prefix {len}");
        }
        let with_names = |names: &[&[u8]]| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0).u8(TAG_SPREAD);
            w.uvarint(names.len() as u64);
            for n in names {
                w.bytes(n);
            }
            w.u8(TAG_END);
            decode(&w.finish())
        };
        assert!(with_names(&[b"{ctr.1.0}a", b"{ctr.2.0}a"]).is_ok());
        assert!(
            with_names(&[b"{ctr.1.0}a", b"{ctr.1.0}b"]).is_err(),
            "shared slot"
        );
        assert!(with_names(&[b"{a}1", b"{b}1"]).is_err(), "not holder names");
        assert!(with_names(&[]).is_err(), "no holders");
        assert!(with_names(&[b""]).is_err(), "empty name");
    }

    #[test]
    fn a_listing_roundtrips_in_its_own_section_and_forged_ones_are_refused() {
        use crate::counter::listing::ListClock;
        let clock = |now_ms| ListClock {
            now_ms,
            window_ms: 60_000,
        };
        let home = b"{tag}home";
        let holders = crate::counter::spread::plan_holders(
            home,
            6,
            &[],
            4,
            &crate::counter::spread::Standalone,
        )
        .unwrap();
        let mut c = Counter::plain(4);
        let spread = Spread {
            id: 6,
            holders: holders.clone(),
            floor: None,
            ceiling: None,
        };
        c.list_spread(spread, clock(1_000)).unwrap();
        let mut ids = 40..;
        c.shrink_listed(2, &mut || ids.next().unwrap(), Some(clock(2_000)))
            .unwrap();
        let bytes = encode(&c);
        assert_eq!(bytes[bytes.len() - 1], TAG_END);
        let back = decode(&bytes).unwrap();
        assert_eq!(back, c);
        let names = |c: &Counter, at| c.holders_at(at, 3_000).unwrap();
        assert_eq!(names(&back, 1_500), holders);
        assert_eq!(names(&back, 2_500), holders[..1].to_vec());
        assert_eq!(names(&back, 500), Vec::<Vec<u8>>::new(), "before it spread");
        let forged = |homes: &[(u64, &[u8])], entries: &[(u64, u64, i64, Option<i64>)]| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0).u8(TAG_LISTING);
            w.ivarint(i64::MIN).uvarint(homes.len() as u64);
            for (id, home) in homes {
                w.fixed_u64(*id).bytes(home);
            }
            w.uvarint(entries.len() as u64);
            for (id, index, listed_at, end) in entries {
                w.fixed_u64(*id)
                    .uvarint(*index)
                    .uvarint(0)
                    .ivarint(*listed_at);
                match end {
                    Some(end) => w.u8(1).ivarint(*end),
                    None => w.u8(0),
                };
            }
            w.u8(TAG_END);
            decode(&w.finish())
        };
        let home: &[(u64, &[u8])] = &[(6, b"{tag}home")];
        assert!(forged(home, &[(6, 1, 1, Some(3))]).is_ok());
        assert!(
            forged(&[], &[(6, 1, 1, None)]).is_err(),
            "no home for its spread"
        );
        assert!(
            forged(home, &[(6, 1, 5, Some(3))]).is_err(),
            "ends before it starts"
        );
        let twice = [(6, 1, 1, None), (6, 1, 2, None)];
        assert!(forged(home, &twice).is_err(), "listed twice at once");
        assert!(
            forged(home, &[(6, 1 << 32, 1, None)]).is_err(),
            "an index past 32 bits"
        );
        // An earlier version's home (no listing) knows no list before its next change.
        let mut old = c.clone();
        old.shrink_listed(1, &mut || ids.next().unwrap(), None)
            .unwrap();
        assert!(old.transfers().unwrap().listing.is_none());
        assert!(old.holders_at(2_500, 3_000).is_err());
    }

    fn giver(name: &[u8], new_id: u64) -> crate::counter::transfer::Giver<'_> {
        crate::counter::transfer::Giver { name, new_id }
    }

    fn folding_home() -> Counter {
        let mut c = spread_counter();
        let mut ids = 40..;
        c.begin_shrink(2, &mut || ids.next().unwrap()).unwrap();
        let mut holder = Counter::plain(3);
        let gone = c.leaving()[0].clone();
        let out = holder
            .seal_into(b"{tag}home", gone.fold_id, 1_000, giver(b"h", 9))
            .unwrap()
            .unwrap();
        let credit = crate::counter::transfer::Credit {
            giver: gone.name.clone(),
            from: gone.name.clone(),
            receiver: b"{tag}home".to_vec(),
            giver_id: 9,
            seq: out.seq,
            dv: out.dv,
            df: out.df,
            dc: 0,
            fold_id: out.fold_id,
        };
        c.apply_credit(&credit).unwrap();
        c.start_transfer(
            b"{x}budget",
            crate::counter::transfer::Units::value_and_floor(2, 0),
            1_001,
            giver(b"{tag}home", 8),
        )
        .unwrap();
        c
    }

    /// A home with every holder of spread `id` folded back (shrunk to 1): retired.
    fn retired_home(id: u64) -> Counter {
        shrunk_home(id, 1)
    }

    /// A home of spread `id` with 3 holders shrunk to `target`, every fold landed.
    fn shrunk_home(id: u64, target: usize) -> Counter {
        let home = b"{tag}home";
        let mut c = Counter::plain(4);
        let holders = crate::counter::spread::plan_holders(
            home,
            id,
            &[],
            3,
            &crate::counter::spread::Standalone,
        )
        .unwrap();
        c.set_spread(Spread {
            id,
            holders: holders.clone(),
            floor: None,
            ceiling: None,
        })
        .unwrap();
        let mut ids = 40..;
        c.begin_shrink(target, &mut || ids.next().unwrap()).unwrap();
        for (i, gone) in c.leaving().to_vec().into_iter().enumerate() {
            let (name, fold_id) = (&gone.name, gone.fold_id);
            let mut holder = Counter::plain(3);
            let out = holder
                .seal_into(home, fold_id, 1_000, giver(name, 9 + i as u64))
                .unwrap()
                .unwrap();
            let credit = crate::counter::transfer::Credit {
                giver: name.clone(),
                from: name.clone(),
                receiver: home.to_vec(),
                giver_id: 9 + i as u64,
                seq: out.seq,
                dv: out.dv,
                df: out.df,
                dc: 0,
                fold_id: out.fold_id,
            };
            c.apply_credit(&credit).unwrap();
        }
        c
    }

    #[test]
    fn folded_marks_roundtrip_in_their_own_section_and_forged_ones_are_refused() {
        let c = shrunk_home(6, 2);
        let t = c.transfers().unwrap();
        assert_eq!((t.folded.len(), t.inbox.len()), (1, 0), "{t:?}");
        let bytes = encode(&c);
        assert_eq!(decode(&bytes).unwrap(), c);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "prefix {len}");
        }
        let kept = c.spread().unwrap().holders[0].clone();
        let section = |marks: &[(u64, u64, u64)]| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
            w.u8(TAG_SPREAD).uvarint(1).bytes(&kept);
            w.u8(TAG_SPREAD_ID).fixed_u64(6);
            w.u8(TAG_FOLDED).uvarint(marks.len() as u64);
            for (id, index, attempt) in marks {
                w.fixed_u64(*id).uvarint(*index).uvarint(*attempt);
            }
            w.u8(TAG_END);
            decode(&w.finish())
        };
        let place = crate::counter::folded::place(&kept).unwrap();
        assert!(section(&[(6, 2, 9), (8, 1, 0)]).is_ok());
        assert!(section(&[]).is_err(), "empty");
        assert!(section(&[(0, 2, 9)]).is_err(), "no spread id");
        assert!(section(&[(6, 0, 9)]).is_err(), "index 0");
        assert!(section(&[(6, 3, 1), (6, 2, 1)]).is_err(), "out of order");
        assert!(section(&[(6, 2, 1), (6, 2, 5)]).is_err(), "repeated");
        assert!(
            section(&[(6, 1, place.attempt)]).is_err(),
            "a mark covering a current holder"
        );
    }

    #[test]
    fn retired_spreads_roundtrip_in_their_own_section_and_forged_ones_are_refused() {
        let c = retired_home(6);
        let t = c.transfers().unwrap();
        assert_eq!((t.retired.clone(), t.inbox.len()), (vec![6], 0));
        let bytes = encode(&c);
        assert!(!bytes.contains(&TAG_TRANSFER_IDS) || bytes.contains(&TAG_RETIRED));
        assert_eq!(decode(&bytes).unwrap(), c);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "prefix {len}");
        }
        // With a transfer section too (a move in flight).
        let mut both = c.clone();
        both.start_transfer(
            b"{x}budget",
            crate::counter::transfer::Units::value_and_floor(1, 0),
            1_001,
            giver(b"{tag}home", 8),
        )
        .unwrap();
        assert_eq!(decode(&encode(&both)).unwrap(), both);
        // Forged: empty, a 0 id, a repeated id, the current spread's id, too many.
        let section = |ids: &[u64], spread_id: Option<u64>| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
            if let Some(id) = spread_id {
                let name = crate::counter::spread::holder_name(b"{tag}home", id, 1, 0);
                w.u8(TAG_SPREAD).uvarint(1).bytes(&name);
                w.u8(TAG_SPREAD_ID).fixed_u64(id);
            }
            w.u8(TAG_RETIRED).uvarint(ids.len() as u64);
            for id in ids {
                w.fixed_u64(*id);
            }
            w.u8(TAG_END);
            decode(&w.finish())
        };
        assert!(section(&[6, 4], None).is_ok());
        assert!(section(&[6, 4], Some(8)).is_ok());
        assert!(section(&[], None).is_err());
        assert!(section(&[0], None).is_err());
        assert!(section(&[6, 6], None).is_err());
        assert!(section(&[6, 8], Some(8)).is_err());
        let many: Vec<u64> = (1..=MAX_RETIRED as u64 + 1).collect();
        assert!(section(&many, None).is_err());
    }

    #[test]
    fn roundtrip_with_transfers_and_refusal_of_forged_ones() {
        let c = folding_home();
        assert_eq!(c.leaving().len(), 2);
        let full = encode(&c);
        assert_eq!(decode(&full).unwrap(), c);
        for len in 0..full.len() {
            assert!(decode(&full[..len]).is_err(), "prefix {len}");
        }
        let mut sealed = Counter::plain(5);
        sealed.seal_into(b"home", 70, 7, giver(b"h", 3)).unwrap();
        assert_eq!(decode(&encode(&sealed)).unwrap(), sealed);
        assert!(decode(&encode(&sealed)).unwrap().is_sealed());
        // Acknowledged: the last seq stays (seqs never go back).
        let mut giver = Counter::plain(5);
        let out = giver
            .start_transfer(
                b"r",
                crate::counter::transfer::Units::value_and_floor(1, 0),
                7,
                self::giver(b"g", 3),
            )
            .unwrap();
        giver.apply_ack(b"r", out.seq);
        let back = decode(&encode(&giver)).unwrap();
        assert_eq!(back.transfers().map(|t| t.last_seq), Some(out.seq));
        // Section 12, as versions before giver and fold ids wrote it, still decodes.
        let section = |body: &dyn Fn(&mut Writer)| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0).u8(TAG_TRANSFER);
            body(&mut w);
            w.u8(TAG_END);
            decode(&w.finish())
        };
        let legacy_fold = |w: &mut Writer| {
            w.uvarint(5).u8(1).bytes(b"home").uvarint(1);
            w.bytes(b"home").uvarint(5).ivarint(0).ivarint(0);
            w.uvarint(1).bytes(b"g").uvarint(3);
            w.uvarint(1).bytes(b"{ctr.1.0}home");
        };
        let old = section(&legacy_fold).unwrap();
        let t = old.transfers().unwrap();
        assert_eq!(
            t.outbox[0].fold_id, LEGACY_FOLD,
            "a sealed holder's entry is its fold"
        );
        assert_eq!((t.inbox[0].giver_id, t.inbox[0].seq), (0, 3));
        assert_eq!(t.leaving[0].fold_id, LEGACY_FOLD);
        let rewritten = encode(&old);
        assert_eq!(decode(&rewritten).unwrap(), old, "rewritten as section 16");
        assert!(rewritten.contains(&TAG_TRANSFER_IDS));
        let both = |w: &mut Writer| {
            legacy_fold(w);
            w.u8(TAG_TRANSFER_IDS).fixed_u64(1).uvarint(1).u8(0);
            w.uvarint(0)
                .uvarint(0)
                .uvarint(1)
                .bytes(b"{ctr.1.0}z")
                .fixed_u64(5);
        };
        assert!(section(&both).is_err(), "two transfer sections");
        let ok = |w: &mut Writer| {
            w.uvarint(5).u8(0).uvarint(1);
            w.bytes(b"r").uvarint(5).ivarint(1).ivarint(0);
            w.uvarint(0).uvarint(0);
        };
        assert!(section(&ok).is_ok());
        let seq_ahead = |w: &mut Writer| {
            w.uvarint(4).u8(0).uvarint(1);
            w.bytes(b"r").uvarint(5).ivarint(1).ivarint(0);
            w.uvarint(0).uvarint(0);
        };
        assert!(section(&seq_ahead).is_err(), "seq beyond the last one");
        let empty = |w: &mut Writer| {
            w.uvarint(0).u8(0).uvarint(0).uvarint(0).uvarint(0);
        };
        assert!(section(&empty).is_err(), "empty section");
        let bad_flag = |w: &mut Writer| {
            w.uvarint(1).u8(2).uvarint(0).uvarint(0).uvarint(0);
        };
        assert!(section(&bad_flag).is_err());
        let unordered_inbox = |w: &mut Writer| {
            w.uvarint(0).u8(0).uvarint(0).uvarint(2);
            w.bytes(b"b").uvarint(1).bytes(b"a").uvarint(1);
            w.uvarint(0);
        };
        assert!(section(&unordered_inbox).is_err());
        let huge = |w: &mut Writer| {
            w.uvarint(0).u8(0).uvarint(1 << 40);
        };
        assert!(section(&huge).is_err());
        // An encoding from before transfers (the spread test's) still decodes.
        assert!(decode(&encode(&spread_counter()))
            .unwrap()
            .transfers()
            .is_none());
    }

    #[test]
    fn a_spread_floor_roundtrips_after_the_transfers_and_needs_holders() {
        let mut c = folding_home();
        let holders = c.spread().unwrap().holders.clone();
        c.set_spread(Spread {
            id: 0,
            holders,
            floor: Some(-7),
            ceiling: None,
        })
        .unwrap();
        let full = encode(&c);
        assert_eq!(decode(&full).unwrap(), c);
        for len in 0..full.len() {
            assert!(decode(&full[..len]).is_err(), "prefix {len}");
        }
        let mut w = Writer::new();
        w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
        w.u8(TAG_SPREAD_FLOOR).ivarint(0).u8(TAG_END);
        assert!(decode(&w.finish()).is_err(), "a floor without holders");
    }

    /// A ceiled spread's home (ceiling 60 (zigzag 120); value 9 and its own share of the
    /// ceiling 20; holders named as a ceiled spread's), with a move of 5 ceiling units to its first holder and one of a value unit
    /// (no ceiling units) to another key in flight.
    fn ceiled_spread_home(floor: Option<i64>) -> Counter {
        use crate::counter::spread::{plan_holders_avoiding, Standalone, CEILED_ATTEMPTS};
        use crate::counter::transfer::Units;
        let mut c = Counter::from_shards(vec![4, 5]).unwrap();
        c.set_ceiling(Some(20)).unwrap();
        let first_attempt = |_| CEILED_ATTEMPTS;
        let holders = plan_holders_avoiding(
            b"{tag}home",
            6,
            &[],
            3,
            &Standalone,
            &|_| false,
            &first_attempt,
        )
        .unwrap();
        let to = holders[0].clone();
        c.set_spread(Spread {
            id: 6,
            holders,
            floor,
            ceiling: Some(60),
        })
        .unwrap();
        c.start_transfer(&to, Units::ceiling(5), 1_000, giver(b"{tag}home", 8))
            .unwrap();
        c.start_transfer(
            b"{x}budget",
            Units::value_and_floor(1, 0),
            1_001,
            giver(b"{tag}home", 8),
        )
        .unwrap();
        c
    }

    /// The bytes of a section 25 carrying `dcs`.
    fn transfer_ceilings(dcs: &[i64]) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(TAG_TRANSFER_CEILINGS).uvarint(dcs.len() as u64);
        for dc in dcs {
            w.ivarint(*dc);
        }
        w.finish()
    }

    #[test]
    fn a_ceiled_spread_and_its_ceiling_units_in_flight_roundtrip_last() {
        for floor in [None, Some(-50)] {
            let c = ceiled_spread_home(floor);
            let dcs: Vec<i64> = c.transfers().unwrap().outbox.iter().map(|o| o.dc).collect();
            assert_eq!(dcs, vec![5, 0], "the holder sorts before {{x}}budget");
            let full = encode(&c);
            let back = decode(&full).unwrap();
            assert_eq!(back, c);
            assert_eq!(back.spread().unwrap().ceiling, Some(60));
            let tail = [
                transfer_ceilings(&[5, 0]),
                vec![TAG_SPREAD_CEILING, 120, TAG_END],
            ]
            .concat();
            assert!(full.ends_with(&tail), "sections 25 and 26 last: {full:?}");
            for len in 0..full.len() {
                assert!(decode(&full[..len]).is_err(), "prefix {len}");
            }
        }
    }

    /// A sealed holder of a ceiled spread folds its ceiling back with its value.
    #[test]
    fn a_folds_ceiling_units_roundtrip() {
        let mut holder = Counter::plain(3);
        holder.set_ceiling(Some(7)).unwrap();
        let out = holder
            .seal_into(b"{tag}home", 70, 1_000, giver(b"h", 3))
            .unwrap()
            .unwrap();
        assert_eq!((out.dv, out.dc), (3, 7));
        let full = encode(&holder);
        assert_eq!(decode(&full).unwrap(), holder);
        for len in 0..full.len() {
            assert!(decode(&full[..len]).is_err(), "prefix {len}");
        }
    }

    #[test]
    fn ceiling_units_are_0_without_their_section_and_a_broken_one_is_refused() {
        // A plain counter with a section 16 of `outbox` moves (none: no section 16), then
        // section 25 as `ceilings` gives it.
        let forged = |outbox: u8, ceilings: Option<Vec<u8>>| -> Vec<u8> {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
            if outbox > 0 {
                w.u8(TAG_TRANSFER_IDS)
                    .fixed_u64(3)
                    .uvarint(u64::from(outbox));
                w.u8(0).uvarint(u64::from(outbox));
                for i in 0..outbox {
                    w.bytes(&[b'a' + i]).uvarint(u64::from(i) + 1).ivarint(0);
                    w.ivarint(0).fixed_u64(0).bytes(b"");
                }
                w.uvarint(0).uvarint(0);
            }
            let mut bytes = w.finish();
            bytes.extend(ceilings.unwrap_or_default());
            bytes.push(TAG_END);
            bytes
        };
        let dcs = |c: Counter| -> Vec<i64> {
            c.transfers().unwrap().outbox.iter().map(|o| o.dc).collect()
        };
        // Written before ceilings: every entry carries none, and encodes as it was.
        let old = decode(&forged(2, None)).unwrap();
        assert_eq!(dcs(old.clone()), vec![0, 0]);
        assert_eq!(encode(&old), forged(2, None));
        let with_ceilings = forged(2, Some(transfer_ceilings(&[0, i64::MIN])));
        let ceiled = decode(&with_ceilings).unwrap();
        assert_eq!(dcs(ceiled.clone()), vec![0, i64::MIN]);
        assert_eq!(encode(&ceiled), with_ceilings);
        let refused = [
            (
                2,
                transfer_ceilings(&[4]),
                "fewer than the outbox's entries",
            ),
            (
                2,
                transfer_ceilings(&[4, 1, 1]),
                "more than the outbox's entries",
            ),
            (
                2,
                transfer_ceilings(&[0, 0]),
                "no ceiling units written out",
            ),
            // A count off by one whose bytes would still read as the outbox's 2 dcs.
            (
                2,
                vec![TAG_TRANSFER_CEILINGS, 1, 8, 2],
                "a count of 1 for 2 entries",
            ),
            (
                2,
                vec![TAG_TRANSFER_CEILINGS, 3, 8, 2],
                "a count of 3 for 2 entries",
            ),
            (0, transfer_ceilings(&[]), "no outbox"),
            (0, transfer_ceilings(&[1]), "no outbox"),
            (
                2,
                vec![TAG_TRANSFER_CEILINGS, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 2],
                "a huge count",
            ),
            (2, vec![TAG_TRANSFER_CEILINGS, 2, 2], "truncated"),
            (
                2,
                vec![TAG_TRANSFER_CEILINGS, 2, 2, 0xff],
                "truncated varint",
            ),
        ];
        for (outbox, section, why) in refused {
            assert!(decode(&forged(outbox, Some(section))).is_err(), "{why}");
        }
        // Out of order: after the spread's ceiling.
        let c = ceiled_spread_home(None);
        let mut bytes = encode(&c);
        let tail = [
            transfer_ceilings(&[5, 0]),
            vec![TAG_SPREAD_CEILING, 120, TAG_END],
        ]
        .concat();
        bytes.truncate(bytes.len() - tail.len());
        let swapped = [
            &[TAG_SPREAD_CEILING, 120][..],
            &transfer_ceilings(&[5, 0]),
            &[TAG_END],
        ]
        .concat();
        bytes.extend(swapped);
        assert!(decode(&bytes).is_err(), "out of order");
        // With its section gone, the move carries none (the state is otherwise the same).
        let mut without = encode(&c);
        let at = without.len() - tail.len();
        without.splice(at..at + transfer_ceilings(&[5, 0]).len(), []);
        let back = decode(&without).unwrap();
        assert_eq!(dcs(back.clone()), vec![0, 0]);
        assert_eq!(encode(&back), without);
    }

    #[test]
    fn a_spread_ceiling_needs_holders_named_for_it_and_a_home_ceiling() {
        let section = |ceiled_names: bool, home_ceiling: bool, holders: bool| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
            if holders {
                let attempt = if ceiled_names {
                    crate::counter::spread::CEILED_ATTEMPTS
                } else {
                    0
                };
                let name = crate::counter::spread::holder_name(b"k", 9, 1, attempt);
                w.u8(TAG_SPREAD).uvarint(1).bytes(&name);
                w.u8(TAG_SPREAD_ID).fixed_u64(9);
            }
            if home_ceiling {
                w.u8(TAG_CEILING).ivarint(4).uvarint(1).ivarint(4);
            }
            w.u8(TAG_SPREAD_CEILING).ivarint(10).u8(TAG_END);
            decode(&w.finish())
        };
        let ceiled = section(true, true, true).unwrap();
        assert_eq!(ceiled.spread().unwrap().ceiling, Some(10));
        assert!(section(false, true, true).is_err(), "unceiled holder names");
        assert!(
            section(true, false, true).is_err(),
            "a home without its own ceiling"
        );
        assert!(
            section(true, true, false).is_err(),
            "a ceiling without holders"
        );
    }

    fn spread_with_id(id: u64, floor: Option<i64>) -> Counter {
        let mut c = Counter::from_shards(vec![4, 5]).unwrap();
        let holders = crate::counter::spread::plan_holders(
            b"{tag}home",
            id,
            &[],
            4,
            &crate::counter::spread::Standalone,
        )
        .unwrap();
        c.set_spread(Spread {
            id,
            holders,
            floor,
            ceiling: None,
        })
        .unwrap();
        c
    }

    #[test]
    fn a_spread_id_roundtrips_last_and_is_refused_alone_or_zero() {
        for floor in [None, Some(-3)] {
            let c = spread_with_id(0x0123_4567_89ab_cdef, floor);
            let full = encode(&c);
            let back = decode(&full).unwrap();
            assert_eq!(back, c);
            assert_eq!(back.spread().unwrap().id, 0x0123_4567_89ab_cdef);
            let tail = [
                &[TAG_SPREAD_ID][..],
                &0x0123_4567_89ab_cdef_u64.to_le_bytes(),
                &[TAG_END],
            ]
            .concat();
            assert!(full.ends_with(&tail), "the id is the last section");
            for len in 0..full.len() {
                assert!(decode(&full[..len]).is_err(), "prefix {len}");
            }
        }
        // A spread made before ids has no section and decodes as id 0.
        let legacy = spread_counter();
        assert_eq!(decode(&encode(&legacy)).unwrap().spread().unwrap().id, 0);
        let section = |id: u64, with_spread: bool| {
            let mut w = Writer::new();
            w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
            if with_spread {
                let name = crate::counter::spread::holder_name(b"k", id.max(1), 1, 0);
                w.u8(TAG_SPREAD).uvarint(1).bytes(&name);
            }
            w.u8(TAG_SPREAD_ID).fixed_u64(id).u8(TAG_END);
            decode(&w.finish())
        };
        assert!(section(9, true).is_ok());
        assert!(section(0, true).is_err(), "id 0 written explicitly");
        assert!(section(9, false).is_err(), "an id without holders");
        // An id whose holders' names carry another one is refused.
        let mut w = Writer::new();
        w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
        let name = crate::counter::spread::holder_name(b"k", 8, 1, 0);
        w.u8(TAG_SPREAD).uvarint(1).bytes(&name);
        w.u8(TAG_SPREAD_ID).fixed_u64(9).u8(TAG_END);
        assert!(decode(&w.finish()).is_err(), "holders of another spread");
        // Tag order: the id before the floor is out of order.
        let mut w = Writer::new();
        w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
        let name = crate::counter::spread::holder_name(b"k", 9, 1, 0);
        w.u8(TAG_SPREAD).uvarint(1).bytes(&name);
        w.u8(TAG_SPREAD_ID).fixed_u64(9);
        w.u8(TAG_SPREAD_FLOOR).ivarint(0).u8(TAG_END);
        assert!(decode(&w.finish()).is_err(), "out of order");
    }

    /// An encoding from before intents (no section 7) still loads: its add tokens match any
    /// add or clear, its ledger entries a decrement of any amount; re-encoded, it gains them.
    #[test]
    fn encodings_without_intents_still_decode() {
        use crate::counter::{TokenUse, WriteKind};
        let mut w = Writer::new();
        w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(4);
        w.u8(TAG_TOKENS).ivarint(500).uvarint(2);
        w.fixed_u64(3).ivarint(900).fixed_u64(8).ivarint(950);
        w.u8(TAG_LEDGER).ivarint(400).uvarint(1);
        w.fixed_u64(5).ivarint(800).u8(1).ivarint(4);
        w.u8(TAG_END);
        let c = decode(&w.finish()).unwrap();
        assert_eq!(
            c.token_use(3, WriteKind::Add(7), 10),
            TokenUse::Retry(Some(4))
        );
        assert_eq!(
            c.token_use(8, WriteKind::Clear, 10),
            TokenUse::Retry(Some(4))
        );
        assert_eq!(c.token_use(8, WriteKind::Decr(1), 10), TokenUse::Conflict);
        assert_eq!(
            c.token_use(5, WriteKind::Decr(99), 10),
            TokenUse::Retry(Some(4))
        );
        assert_eq!(c.token_use(5, WriteKind::Add(1), 10), TokenUse::Conflict);
        assert_eq!(
            c.ledger().next_sweep(),
            400,
            "the earlier of the two schedules"
        );
        let again = decode(&encode(&c)).unwrap();
        assert_eq!(again, c);
        assert!(decode(&[FORMAT_V1, TAG_VALUE, 0, TAG_INTENTS, 0, TAG_END]).is_err());
    }

    /// Every section decodes in linear (or n log n) time whatever the order of its contents:
    /// token and ledger sections with expiries falling as fingerprints rise, and fingerprints
    /// sharing their low bits (other sections are bounded: shards 1024, buckets 4096).
    #[test]
    fn decoding_is_linear_in_adversarial_orders() {
        let n = 100_000u64;
        let mut w = Writer::new();
        w.u8(FORMAT_V1).u8(TAG_VALUE).ivarint(0);
        w.u8(TAG_TOKENS).ivarint(0).uvarint(n);
        for i in 0..n {
            w.fixed_u64(i << 32).ivarint(50_000_000 - i as i64);
        }
        w.u8(TAG_LEDGER).ivarint(0).uvarint(n);
        for i in 0..n {
            w.fixed_u64((i << 40) | 1)
                .ivarint(90_000_000 - 7 * i as i64)
                .u8(0);
        }
        w.u8(TAG_INTENTS).uvarint(n);
        for _ in 0..n {
            w.uvarint(u64::from(Intent::LEGACY_DECREMENT.bits()));
        }
        w.u8(TAG_END);
        let start = std::time::Instant::now();
        let c = decode(&w.finish()).unwrap();
        assert_eq!(c.token_count(), 2 * n as usize);
        // Linear: tens of ms; the quadratic decoder took minutes at this size.
        assert!(start.elapsed().as_secs() < 5, "{:?}", start.elapsed());
    }

    #[test]
    fn every_truncation_is_refused() {
        let full = encode(&with_tokens());
        for len in 0..full.len() {
            assert!(decode(&full[..len]).is_err(), "prefix {len}");
        }
    }

    #[test]
    fn every_truncation_of_a_sharded_counter_is_refused() {
        let full = encode(&Counter::from_shards(vec![300, -70000, 12]).unwrap());
        for len in 0..full.len() {
            assert!(decode(&full[..len]).is_err(), "prefix {len}");
        }
    }
}
