//! Forged DUMP payloads for both native types (ctr-count, ctr-pncnt), each sealed with a valid
//! CRC64 so that Redis hands it to the module: random byte flips, overwrites, insertions,
//! truncations and appended bytes in the module's buffer and in the framing around it,
//! structured random states with fields and counts at the extremes, and every truncation of
//! the real payloads. Seeded PRNG (CTR_FUZZ_SEED).
//!
//! Each payload is refused (an error, nothing stored, the server answers) or yields a value
//! that every read command, DEBUG DIGEST-VALUE, MEMORY USAGE, DUMP and a write can handle, and
//! that is saved and loaded again: every 400 payloads (and at the end) DEBUG RELOAD must
//! succeed with an unchanged dataset digest.

mod common;

use std::time::{Duration, Instant};

use common::forge::{edge_i64, mutate, random_bytes, random_ctr_state, DumpFrame};
use common::pnc::{state_blob, stored_blob, varint, Rng};
use common::{ivarint, uvarint, Conn, Server, Value};

const RANDOM_PAYLOADS: usize = 3_000;
const TIME_BUDGET: Duration = Duration::from_secs(120);

fn ok() -> Value {
    Value::Simple("OK".into())
}

/// Real values of every shape, made by commands; returns their keys.
fn sources(c: &mut Conn) -> Vec<&'static str> {
    let now = c.q("TIME").array()[0].text().parse::<i64>().unwrap() * 1000;
    for cmd in [
        "CTR.ADD plain 5",
        "CTR.ADD big -9223372036854775808",
        "CTR.ADD floored 100",
        "CTR.FLOOR floored -3",
        "CTR.ADD tokens 1 TOKEN a",
        "CTR.ADD tokens 2 TOKEN b",
        "CTR.ADD tokens 3 TOKEN c",
        "CTR.ADD ledger 50",
        "CTR.FLOOR ledger 0",
        "CTR.DECRFLOOR ledger 5 TOKEN x",
        "CTR.DECRFLOOR ledger 500 TOKEN y",
        "CTR.RECONCILE buckets 10",
        "PNC.ADD pnc-local 7",
        "PNC.ADD pnc-local -3",
    ] {
        assert!(!c.q(cmd).is_error(), "{cmd}");
    }
    for i in 0..20 {
        let at = (now - i * 60_000).to_string();
        assert!(!c.cmd(&["CTR.ADD", "buckets", "1", "AT", &at]).is_error());
    }
    // Shards [1, 2, 3, -6, 9223372036854775807]: format 1, VALUE, SHARDS 5 x, END.
    let mut sharded = vec![1u8, 1];
    sharded.extend(ivarint(i64::MAX - 3));
    sharded.extend([2, 5]);
    for v in [1, 2, 3, -6, i64::MAX - 3] {
        sharded.extend(ivarint(v));
    }
    sharded.push(0);
    assert_eq!(c.cmd(&[&b"CTR.SETSTATE"[..], b"sharded", &sharded]), ok());
    let max = i64::MAX as u64;
    let merged = state_blob(&[("a", max, 0), ("b", 0, max), ("eu-west", 5, 9)]);
    assert!(!c
        .cmd(&[&b"PNC.MERGE"[..], b"pnc-merged", &merged])
        .is_error());
    let many: Vec<(String, u64, u64)> = (0..40)
        .map(|i| (format!("r-{i:016x}"), i * 1_000, 7))
        .collect();
    let many: Vec<(&str, u64, u64)> = many
        .iter()
        .map(|(id, p, n)| (id.as_str(), *p, *n))
        .collect();
    assert!(!c
        .cmd(&[&b"PNC.MERGE"[..], b"pnc-many", &state_blob(&many)])
        .is_error());
    vec![
        "plain",
        "big",
        "floored",
        "tokens",
        "ledger",
        "buckets",
        "sharded",
        "pnc-local",
        "pnc-merged",
        "pnc-many",
    ]
}

/// Blobs with counts and lengths far beyond what their bytes hold or the bounds allow.
fn extreme_counts() -> Vec<(bool, Vec<u8>)> {
    let mut out = Vec::new();
    let ctr = |sections: &[Vec<u8>]| {
        let mut b = vec![1u8, 1, 0];
        for s in sections {
            b.extend(s);
        }
        b.push(0);
        (false, b)
    };
    for n in [2u64, 1024, 1025, 1 << 20, 1 << 40, u64::MAX] {
        let mut shards = vec![2u8];
        shards.extend(uvarint(n));
        shards.extend([0, 0]);
        out.push(ctr(&[shards]));
        let mut tokens = vec![3u8, 0];
        tokens.extend(uvarint(n));
        tokens.extend([0; 9]);
        out.push(ctr(&[tokens]));
        let mut floor = vec![4u8, 0];
        floor.extend(uvarint(n));
        floor.push(0);
        out.push(ctr(&[floor]));
        let mut history = vec![6u8, 2, 2, 0, 0, 0, 0, 0];
        history.extend(uvarint(n));
        history.extend([2, 0]);
        out.push(ctr(&[history]));
        let mut pnc = vec![1u8];
        pnc.extend(varint(n));
        pnc.extend([1, b'a', 1, 1, 0]);
        out.push((true, pnc));
        let mut long_id = vec![1u8, 1];
        long_id.extend(varint(n));
        long_id.extend(b"abc");
        long_id.extend([1, 1, 0]);
        out.push((true, long_id));
    }
    out
}

struct Run {
    accepted: usize,
    native: usize,
    refused: usize,
    next_key: usize,
}

/// RESTOREs one payload and checks what follows.
fn try_payload(server: &Server, c: &mut Conn, run: &mut Run, what: &str, payload: &[u8]) {
    let reply = c.cmd(&[&b"RESTORE"[..], b"forged", b"0", payload, b"REPLACE"]);
    match reply {
        Value::Error(e) => {
            run.refused += 1;
            assert!(!e.contains("internal error"), "{what}: {e}");
            assert_eq!(
                c.q("EXISTS forged"),
                Value::Int(0),
                "{what}: refused yet stored"
            );
        }
        Value::Simple(s) if s == "OK" => {
            if !c.q("TYPE forged").text().starts_with("ctr-") {
                // A mutated type byte made a native Redis value: Redis's own business.
                run.native += 1;
                c.q("DEL forged");
                return;
            }
            run.accepted += 1;
            exercise(c, what, server.least_memory_usage());
            // Kept, so that every later DEBUG RELOAD saves and loads it again.
            let name = format!("accepted:{}", run.next_key);
            run.next_key += 1;
            assert_eq!(c.cmd(&["RENAME", "forged", &name]), ok(), "{what}");
        }
        other => panic!("{what}: RESTORE replied {other:?}"),
    }
    if (run.accepted + run.refused + run.native).is_multiple_of(100) {
        assert!(server.alive(), "{what}: server down\n{}", server.log());
    }
}

/// Every read, the digest, MEMORY USAGE, DUMP/RESTORE and a write on an accepted value.
fn exercise(c: &mut Conn, what: &str, least_memory_usage: i64) {
    let kind = c.q("TYPE forged").text();
    let reads: &[&str] = match kind.as_str() {
        "ctr-count" => &["CTR.GET", "CTR.INFO", "CTR.MGET"],
        "ctr-pncnt" => &["PNC.GET", "PNC.STATE", "PNC.INFO"],
        other => panic!("{what}: restored a {other}"),
    };
    for r in reads {
        let reply = c.cmd(&[r, "forged"]);
        assert!(!reply.is_error(), "{what}: {r} -> {reply:?}");
    }
    let digest = c.q("DEBUG DIGEST-VALUE forged");
    assert!(!digest.is_error(), "{what}");
    assert!(
        c.q("MEMORY USAGE forged").int() >= least_memory_usage,
        "{what}"
    );
    let payload = c.q("DUMP forged").bytes();
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"again", b"0", &payload, b"REPLACE"]),
        ok(),
        "{what}: its own DUMP"
    );
    if kind == "ctr-count" {
        assert_eq!(c.q("DEBUG DIGEST-VALUE again"), digest, "{what}");
        let reply = c.q("CTR.ADD again 1");
        assert!(!reply.flat_text().contains("internal error"), "{what}");
        let reply = c.q("CTR.DECRFLOOR again 1 TOKEN z");
        assert!(!reply.flat_text().contains("internal error"), "{what}");
    } else {
        assert_eq!(c.q("PNC.STATE again"), c.q("PNC.STATE forged"), "{what}");
        let reply = c.q("PNC.ADD again -1");
        assert!(!reply.flat_text().contains("internal error"), "{what}");
    }
}

fn reload_unchanged(server: &Server, c: &mut Conn, after: &str) {
    let before = c.q("DEBUG DIGEST");
    assert_eq!(
        c.q("DEBUG RELOAD"),
        ok(),
        "after {after}: the dataset no longer reloads\n{}",
        server.log()
    );
    assert_eq!(
        c.q("DEBUG DIGEST"),
        before,
        "after {after}: the reload changed the dataset"
    );
}

#[test]
fn forged_payloads_are_refused_or_fully_usable() {
    let seed: u64 = std::env::var("CTR_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xd0_c0ffee);
    eprintln!("restore fuzz seed {seed} (CTR_FUZZ_SEED to change)");
    // Uncompressed payloads, so that the module's buffer can be read out and replaced.
    // No idle sweep: it would (rightly) release forged expired tokens between the digests this
    // test compares (tests/ctr_sweep.rs covers it).
    let server = Server::start_with(&["--rdbcompression", "no"], &["sweep-budget", "0"]);
    let mut c = server.conn();
    let keys = sources(&mut c);
    let frames: Vec<(bool, DumpFrame)> = keys
        .iter()
        .map(|k| {
            let payload = c.cmd(&["DUMP", k]).bytes();
            let frame = DumpFrame::parse(&payload).unwrap_or_else(|| panic!("framing of {k}"));
            (k.starts_with("pnc"), frame)
        })
        .collect();
    let ctr_frame = frames.iter().find(|(pnc, _)| !pnc).map(|(_, f)| f).unwrap();
    let pnc_frame = frames.iter().find(|(pnc, _)| *pnc).map(|(_, f)| f).unwrap();
    let mut run = Run {
        accepted: 0,
        native: 0,
        refused: 0,
        next_key: 0,
    };
    let started = Instant::now();

    // Every truncation of every real payload, and appended bytes, CRC fixed.
    for (i, (_, frame)) in frames.iter().enumerate() {
        let full = frame.resealed(|_| {});
        let body_len = full.len() - 10;
        for cut in 0..body_len {
            let payload = frame.resealed(|b| b.truncate(cut));
            try_payload(
                &server,
                &mut c,
                &mut run,
                &format!("source {i} cut at {cut}"),
                &payload,
            );
        }
        for extra in [&[0u8][..], &[0, 0], &[5, 1, 0], &[0xff; 9]] {
            let payload = frame.resealed(|b| b.extend_from_slice(extra));
            try_payload(
                &server,
                &mut c,
                &mut run,
                &format!("source {i} + {extra:?}"),
                &payload,
            );
        }
    }
    let truncations = run.accepted + run.refused + run.native;
    reload_unchanged(&server, &mut c, "the truncations");

    // Extreme counts, in both types' buffers.
    for (i, (pnc, blob)) in extreme_counts().into_iter().enumerate() {
        let frame = if pnc { pnc_frame } else { ctr_frame };
        try_payload(
            &server,
            &mut c,
            &mut run,
            &format!("extreme #{i}"),
            &frame.with_blob(&blob),
        );
    }

    // Random forgeries.
    let mut rng = Rng::new(seed);
    let now = c.q("TIME").array()[0].text().parse::<i64>().unwrap() * 1000;
    let mut random = 0;
    while random < RANDOM_PAYLOADS && started.elapsed() < TIME_BUDGET {
        random += 1;
        let (pnc, frame) = &frames[rng.below(frames.len() as u64) as usize];
        let (what, payload) = match rng.below(6) {
            0 | 1 => (
                "mutated buffer",
                frame.with_blob(&mutate(&mut rng, &frame.blob)),
            ),
            2 => (
                "mutated framing",
                frame.resealed(|body| {
                    let mutated = mutate(&mut rng, body);
                    *body = mutated;
                }),
            ),
            3 if !pnc => (
                "random state",
                ctr_frame.with_blob(&random_ctr_state(&mut rng, now)),
            ),
            3 => {
                let n = rng.below(5) as usize;
                let entries: Vec<(&str, u64, u64)> = (0..n)
                    .map(|i| {
                        let id = ["a", "b", "c", "d", "e"][i];
                        let p = edge_i64(&mut rng, now) as u64;
                        (id, p, rng.below(3) * (i64::MAX as u64 / 2))
                    })
                    .collect();
                let home = (rng.below(2) == 0).then_some(("a", rng.below(3)));
                (
                    "random pnc state",
                    pnc_frame.with_blob(&stored_blob(&entries, home)),
                )
            }
            4 => {
                let len = rng.below(40) as usize;
                (
                    "random buffer",
                    frame.with_blob(&random_bytes(&mut rng, len)),
                )
            }
            _ => {
                // The other type's buffer under this type's header.
                let other = if *pnc { ctr_frame } else { pnc_frame };
                ("swapped type", frame.with_blob(&other.blob))
            }
        };
        try_payload(
            &server,
            &mut c,
            &mut run,
            &format!("random #{random} ({what})"),
            &payload,
        );
        if random.is_multiple_of(400) {
            reload_unchanged(&server, &mut c, &format!("random #{random}"));
        }
    }
    reload_unchanged(&server, &mut c, "the last payload");
    eprintln!(
        "{} payloads ({truncations} truncations and appends, {random} random) in {:?}: \
         {} accepted, {} refused, {} turned into native Redis values by a mutated type byte",
        run.accepted + run.refused + run.native,
        started.elapsed(),
        run.accepted,
        run.refused,
        run.native
    );
    assert!(random >= RANDOM_PAYLOADS / 10, "far too few payloads ran");
    assert!(
        run.refused > run.accepted,
        "the forgeries are mostly refused"
    );
}
