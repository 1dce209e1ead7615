//! Memory accounting: `MEMORY USAGE` against the real allocation for every shape of counter,
//! used_memory back to its baseline after every way a key goes away, and the module's gauges
//! back to 0. See docs/RELIABILITY.md for the method.

mod common;

use common::{Server, Value};

fn tokens_held(server: &Server) -> i64 {
    server
        .info_field("ctr", "ctr_tokens_held")
        .parse()
        .expect("ctr_tokens_held")
}

/// Ledger entries (CTR.DECRFLOOR tokens) are tokens held too, whichever way the counter
/// arrived: a write, a reload, a RESTORE or a COPY.
#[test]
fn tokens_held_counts_ledger_entries_after_reload_restore_and_copy() {
    let server = Server::start();
    let mut c = server.conn();
    c.q("CTR.ADD k 10 TOKEN add-1");
    c.q("CTR.DECRFLOOR k 1 TOKEN take-1");
    c.q("CTR.DECRFLOOR k 1 TOKEN take-2");
    let info = c.q("CTR.INFO k");
    assert_eq!(
        (info.field("tokens"), info.field("ledger")),
        (Value::Int(1), Value::Int(2))
    );
    assert_eq!(tokens_held(&server), 3);
    assert_eq!(c.q("DEBUG RELOAD"), Value::Simple("OK".into()));
    assert_eq!(tokens_held(&server), 3, "after a reload");
    let payload = c.q("DUMP k").bytes();
    assert_eq!(
        c.cmd(&[&b"RESTORE"[..], b"r", b"0", &payload]),
        Value::Simple("OK".into())
    );
    assert_eq!(tokens_held(&server), 6, "after a RESTORE");
    assert_eq!(c.q("COPY k c"), Value::Int(1));
    assert_eq!(tokens_held(&server), 9, "after a COPY");
    for key in ["k", "r", "c"] {
        c.cmd(&["DEL", key]);
    }
    assert_eq!(tokens_held(&server), 0);
}
