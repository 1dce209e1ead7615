//! Read links (`src/runtime/read_links.rs`) on a real 3-master cluster: a gathered read of a
//! spread counter sends its requests to the other masters' client ports (`CTR.GATHER`) on the
//! module's own connections, and every guarantee of a gathered read holds there as over the
//! bus: every add completed before a read began is in its total; a link that cannot
//! authenticate falls back to the bus (and is used once its credentials are set); a link
//! request reads only what its ACL user may; a frozen master fails the read within the timeout
//! and reads recover after; `ctr.read-links no` sends everything over the bus; a replica reads
//! through links too.

mod common;

use common::cluster::{key_slot, Cluster};
use common::{eventually, names, uvarint, Conn, Server, Value};

/// A gather request for one holder (src/persist/gather_msg.rs: version 1, request id, names).
fn gather_request(id: u64, name: &str) -> Vec<u8> {
    let mut out = vec![1];
    out.extend(id.to_le_bytes());
    out.extend(uvarint(1));
    out.extend(uvarint(name.len() as u64));
    out.extend(name.as_bytes());
    out
}

/// What a response answers for its one holder.
#[derive(Debug, PartialEq)]
enum HolderAnswer {
    Value(i64),
    Failed(String),
    Other(u8),
}

/// Decodes a one-holder response: (request id, answer).
fn one_answer(bytes: &[u8]) -> (u64, HolderAnswer) {
    fn varint(bytes: &[u8], at: &mut usize) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let b = bytes[*at];
            *at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return v;
            }
            shift += 7;
        }
    }
    assert_eq!(bytes[0], 1, "response version");
    let id = u64::from_le_bytes(bytes[1..9].try_into().expect("id"));
    let mut at = 9;
    assert_eq!(varint(bytes, &mut at), 1, "one answer");
    let tag = bytes[at];
    at += 1;
    let answer = match tag {
        0 => {
            let z = varint(bytes, &mut at);
            HolderAnswer::Value(((z >> 1) as i64) ^ -((z & 1) as i64))
        }
        2 => {
            let len = varint(bytes, &mut at) as usize;
            HolderAnswer::Failed(String::from_utf8_lossy(&bytes[at..at + len]).into_owned())
        }
        other => HolderAnswer::Other(other),
    };
    (id, answer)
}

fn ok() -> Value {
    Value::Simple("OK".into())
}

fn stat(server: &Server, field: &str) -> u64 {
    server
        .info_field("ctr", field)
        .parse()
        .unwrap_or_else(|_| panic!("INFO ctr {field}"))
}

/// A counter spread over 16 holders on every master, each holder given `i + 1`; its home's
/// node and holders.
fn spread(cluster: &Cluster, home: &str) -> (usize, Vec<String>) {
    let mut client = cluster.client();
    let holders = names(&client.cmd(&["CTR.SPREAD", home, "16"]));
    for (i, h) in holders.iter().enumerate() {
        client.cmd(&["CTR.ADD", h, &(i + 1).to_string()]);
    }
    (cluster.owner(key_slot(home.as_bytes())), holders)
}

fn set_everywhere(cluster: &Cluster, args: &[&str]) {
    for node in &cluster.nodes {
        assert_eq!(node.conn().cmd(args), ok(), "{args:?}");
    }
}

/// Adds, each completed (acknowledged by its holder's master) before the next read begins, are
/// all in that read's total: one writer alternates an add on another master's holder and a
/// read of the home, 300 times. The reads went over links (requests counted on the home's
/// master, answered by the others), never over the bus after the first.
#[test]
fn every_add_completed_before_a_read_is_in_its_total_over_read_links() {
    let cluster = Cluster::start(3, &[]);
    let home = "{linked}";
    let (home_node, holders) = spread(&cluster, home);
    let total = (1..=16).sum::<i64>();
    let mut reader = cluster.nodes[home_node].conn();
    assert_eq!(reader.cmd(&["CTR.GET", home]).int(), total);
    let remote: Vec<&String> = holders
        .iter()
        .filter(|h| cluster.owner(key_slot(h.as_bytes())) != home_node)
        .collect();
    assert!(remote.len() >= 2, "holders on the other masters");
    let mut client = cluster.client();
    let links_before = stat(&cluster.nodes[home_node], "ctr_read_link_requests");
    for i in 0..300i64 {
        let h = remote[i as usize % remote.len()];
        client.cmd(&["CTR.ADD", h, "1"]);
        assert_eq!(
            reader.cmd(&["CTR.GET", home]).int(),
            total + i + 1,
            "read {i}"
        );
    }
    let sent = stat(&cluster.nodes[home_node], "ctr_read_link_requests") - links_before;
    assert!(sent >= 600, "300 reads x 2 masters over links, {sent} sent");
    assert_eq!(
        stat(&cluster.nodes[home_node], "ctr_read_link_fallbacks"),
        0
    );
    let clients = cluster.nodes[(home_node + 1) % 3]
        .conn()
        .cmd(&["CLIENT", "LIST"])
        .text();
    assert!(clients.contains("name=ctr-read-link"), "{clients}");
}

/// `ctr.read-links no`: the same reads, every request over the bus.
#[test]
fn with_read_links_off_reads_go_over_the_bus() {
    let cluster = Cluster::start(3, &["read-links", "no"]);
    let home = "{bus-only}";
    let (home_node, _) = spread(&cluster, home);
    let mut reader = cluster.nodes[home_node].conn();
    for _ in 0..20 {
        assert_eq!(reader.cmd(&["CTR.GET", home]).int(), (1..=16).sum::<i64>());
    }
    assert_eq!(stat(&cluster.nodes[home_node], "ctr_read_link_requests"), 0);
    assert_eq!(stat(&cluster.nodes[home_node], "ctr_read_links_opened"), 0);
    assert_eq!(
        reader.q("CONFIG GET ctr.read-links").flat_text(),
        "ctr.read-links no"
    );
}

/// Links authenticate as `ctr.read-link-user` with `ctr.read-link-password`. While that user
/// does not exist on the other masters, a link fails its handshake (logged with the server's
/// reason, never the password) and reads go over the bus, exactly; once the user exists, the
/// next link authenticates and carries the reads.
#[test]
fn links_authenticate_with_the_configured_credentials_and_fall_back_without() {
    let cluster = Cluster::start(3, &[]);
    let home = "{guarded}";
    let (home_node, _) = spread(&cluster, home);
    let mut reader = cluster.nodes[home_node].conn();
    assert_eq!(reader.q("CONFIG SET ctr.read-link-user linker"), ok());
    assert_eq!(reader.q("CONFIG SET ctr.read-link-password s3cret"), ok());
    assert_eq!(
        reader.q("CONFIG GET ctr.read-link-user").flat_text(),
        "ctr.read-link-user linker"
    );
    for _ in 0..20 {
        assert_eq!(reader.cmd(&["CTR.GET", home]).int(), (1..=16).sum::<i64>());
    }
    let log = cluster.nodes[home_node].log();
    assert!(log.contains("ctr: read link to master"), "{log}");
    assert!(log.contains("WRONGPASS"), "{log}");
    assert!(!log.contains("s3cret"));
    assert_eq!(stat(&cluster.nodes[home_node], "ctr_read_link_requests"), 0);
    set_everywhere(
        &cluster,
        &["ACL", "SETUSER", "linker", "on", ">s3cret", "~*", "+@all"],
    );
    eventually(10, || {
        assert_eq!(reader.cmd(&["CTR.GET", home]).int(), (1..=16).sum::<i64>());
        (stat(&cluster.nodes[home_node], "ctr_read_link_requests") > 0).then_some(())
    });
    // The links answer from now on: a burst of reads goes over them.
    let before = stat(&cluster.nodes[home_node], "ctr_read_link_requests");
    for _ in 0..20 {
        assert_eq!(reader.cmd(&["CTR.GET", home]).int(), (1..=16).sum::<i64>());
    }
    assert!(stat(&cluster.nodes[home_node], "ctr_read_link_requests") >= before + 40);
}

/// `CTR.GATHER` is a read like any other: a user allowed only `~atk:*` gets a NOPERM answer for
/// another counter's holder, an allowed holder's value for its own, and a malformed request is
/// an error. Nothing is written.
#[test]
fn a_link_request_reads_only_what_its_user_may() {
    let cluster = Cluster::start(3, &[]);
    let mut client = cluster.client();
    let bank = names(&client.cmd(&["CTR.SPREAD", "bank", "4"]));
    let atk = names(&client.cmd(&["CTR.SPREAD", "atk:x", "4"]));
    for h in bank.iter().chain(&atk) {
        client.cmd(&["CTR.ADD", h, "7"]);
    }
    // One holder of each served by node 0 (not the home, listed first).
    let on_zero = |list: &[String]| {
        list[1..]
            .iter()
            .find(|h| cluster.owner(key_slot(h.as_bytes())) == 0)
            .cloned()
    };
    let mut admin = cluster.nodes[0].conn();
    assert_eq!(admin.q("ACL SETUSER eve on >pw ~atk:* ~{ctr.* +@all"), ok());
    let mut eve = cluster.nodes[0].conn();
    assert_eq!(eve.q("AUTH eve pw"), ok());
    let ask = |conn: &mut Conn, name: &str| {
        let reply = conn.cmd(&[&b"CTR.GATHER"[..], &gather_request(7, name)]);
        let (id, answer) = one_answer(&reply.bytes());
        assert_eq!(id, 7);
        vec![answer]
    };
    if let Some(bank_holder) = on_zero(&bank) {
        // `{ctr.` names are allowed by the pattern; the ACL check is the holder's own key.
        assert_eq!(ask(&mut admin, &bank_holder), vec![HolderAnswer::Value(7)]);
    }
    let mut restricted = cluster.nodes[0].conn();
    assert_eq!(
        restricted.q("ACL SETUSER mallory on >pw ~atk:* +@all"),
        ok()
    );
    assert_eq!(restricted.q("AUTH mallory pw"), ok());
    if let Some(bank_holder) = on_zero(&bank) {
        match &ask(&mut restricted, &bank_holder)[..] {
            [HolderAnswer::Failed(text)] => assert!(text.contains("NOPERM"), "{text}"),
            other => panic!("mallory read another user's holder: {other:?}"),
        }
    }
    if let Some(own) = on_zero(&atk) {
        // mallory's pattern does not cover holder names either: refused too.
        let answer = ask(&mut restricted, &own);
        assert!(
            matches!(&answer[..], [HolderAnswer::Failed(_)]),
            "{own}: {answer:?}"
        );
        assert_eq!(ask(&mut eve, &own), vec![HolderAnswer::Value(7)]);
    }
    let bad = eve.cmd(&["CTR.GATHER", "not a request"]);
    assert_eq!(bad.error(), "ERR malformed gather request");
    assert!(eve.cmd(&["CTR.GATHER"]).is_error());
    assert_eq!(client.cmd(&["CTR.GET", "bank"]).int(), 28);
}

/// A master frozen longer than the gather timeout fails the read with the timeout's error (no
/// partial sum); once it wakes, reads are exact again, over the links.
#[test]
fn a_frozen_master_fails_the_read_within_the_timeout_and_reads_recover() {
    let cluster = Cluster::start(3, &["gather-timeout-ms", "500"]);
    let home = "{frozen}";
    let (home_node, _) = spread(&cluster, home);
    let mut reader = cluster.nodes[home_node].conn();
    assert_eq!(reader.cmd(&["CTR.GET", home]).int(), (1..=16).sum::<i64>());
    let sleeper = (home_node + 1) % 3;
    let mut conn = cluster.nodes[sleeper].conn();
    let frozen = std::thread::spawn(move || conn.cmd(&["DEBUG", "SLEEP", "2"]));
    std::thread::sleep(std::time::Duration::from_millis(100));
    let failed = reader.cmd(&["CTR.GET", home]);
    assert!(failed.is_error(), "{failed:?}");
    assert!(
        failed.error().contains("did not answer"),
        "{}",
        failed.error()
    );
    assert_eq!(frozen.join().expect("sleep"), ok());
    eventually(10, || {
        let v = reader.cmd(&["CTR.GET", home]);
        (v == Value::Int((1..=16).sum::<i64>())).then_some(())
    });
    let before = stat(&cluster.nodes[home_node], "ctr_read_link_requests");
    assert_eq!(reader.cmd(&["CTR.GET", home]).int(), (1..=16).sum::<i64>());
    assert!(stat(&cluster.nodes[home_node], "ctr_read_link_requests") > before);
}

/// A replica of the home's master reads the total through its own links to the masters.
#[test]
fn a_replica_reads_the_total_over_its_own_links() {
    let cluster = Cluster::start(3, &[]);
    let home = "{replicated}";
    let (home_node, holders) = spread(&cluster, home);
    let replica = cluster.start_replica_of(home_node);
    let mut r = replica.conn();
    assert_eq!(r.q("READONLY"), ok());
    let mut client = cluster.client();
    for (i, h) in holders.iter().enumerate().take(8) {
        client.cmd(&["CTR.ADD", h, &(100 * (i + 1)).to_string()]);
    }
    let expected = (1..=16).sum::<i64>() + (1..=8).map(|i| 100 * i).sum::<i64>();
    eventually(10, || {
        (r.cmd(&["CTR.GET", home]) == Value::Int(expected)).then_some(())
    });
    for _ in 0..20 {
        assert_eq!(r.cmd(&["CTR.GET", home]).int(), expected);
    }
    assert!(stat(&replica, "ctr_read_link_requests") >= 40);
}
