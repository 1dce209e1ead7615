//! Helpers for PN-Counter tests: hand-built state blobs (the documented layout, written here
//! independently of the module's encoder) and a deterministic PRNG.

/// A bincode 2 "standard" varint: below 251 one byte, else 251/252/253 + 2/4/8 LE bytes.
pub fn varint(v: u64) -> Vec<u8> {
    if v < 251 {
        vec![v as u8]
    } else if v <= u64::from(u16::MAX) {
        let mut out = vec![251];
        out.extend((v as u16).to_le_bytes());
        out
    } else if v <= u64::from(u32::MAX) {
        let mut out = vec![252];
        out.extend((v as u32).to_le_bytes());
        out
    } else {
        let mut out = vec![253];
        out.extend(v.to_le_bytes());
        out
    }
}

/// A PNC.STATE blob, version 1, with the entries exactly as given (no sorting, no checks).
pub fn state_blob(entries: &[(&str, u64, u64)]) -> Vec<u8> {
    let mut out = vec![1];
    out.extend(varint(entries.len() as u64));
    for (id, p, n) in entries {
        out.extend(varint(id.len() as u64));
        out.extend_from_slice(id.as_bytes());
        out.extend(varint(*p));
        out.extend(varint(*n));
    }
    out
}

/// The stored form (PNC.SETSTATE, RDB): the state blob plus a home record.
pub fn stored_blob(entries: &[(&str, u64, u64)], home: Option<(&str, u64)>) -> Vec<u8> {
    let mut out = state_blob(entries);
    match home {
        None => out.push(0),
        Some((id, gen)) => {
            out.push(1);
            out.extend(varint(id.len() as u64));
            out.extend_from_slice(id.as_bytes());
            out.extend(varint(gen));
        }
    }
    out
}

/// xorshift64*: deterministic randomness for tests, so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for k in (1..items.len()).rev() {
            items.swap(k, self.below(k as u64 + 1) as usize);
        }
    }
}

/// Runs the pnc-sync binary built with the tests: its exit status and its output (stdout, then
/// stderr).
pub fn sync_tool(args: &[String]) -> (i32, String) {
    // Set for the module crate's tests (the client crate's tests share this file, not the tool).
    let Some(tool) = option_env!("CARGO_BIN_EXE_pnc-sync") else {
        panic!("pnc-sync is built with the module crate's tests only");
    };
    let out = std::process::Command::new(tool)
        .args(args)
        .output()
        .expect("run pnc-sync");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}
