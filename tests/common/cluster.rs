//! Redis Cluster for tests: masters started by the harness (each a [`Server`] with
//! `--cluster-enabled yes`), slots assigned with CLUSTER ADDSLOTSRANGE, nodes joined with
//! CLUSTER MEET; and a minimal cluster-aware client (CRC16 key slots with hash tags, the slot
//! map from CLUSTER SLOTS, MOVED/ASK followed, TRYAGAIN retried).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{info_value, Conn, Server, Value};

pub const SLOTS: u16 = 16384;

/// CRC16/XMODEM, the checksum Redis Cluster hashes keys with.
pub fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of a key: only the part inside the first `{...}` is hashed when that part is not
/// empty.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

/// A hash tag whose keys hash to `slot` (`{t<n>}`, searched).
pub fn tag_for_slot(slot: u16) -> String {
    (0..)
        .map(|n| format!("t{n}"))
        .find(|t| key_slot(t.as_bytes()) == slot)
        .expect("some tag hashes to every slot")
}

/// The options that make a server a cluster node (its nodes.conf lives in its own dir).
pub const NODE_ARGS: &[&str] = &[
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "5000",
];

/// The node options of a cluster whose test kills a master for its replica to take over
/// ([`Cluster::start_for_failovers`]): a node that does not answer for 2 s is failing, not 5 s,
/// so that each failover takes about 4 s instead of 8. Not for a test that pauses a master (a
/// master paused past 2 s would be failed over as well); a paused replica only misses votes.
pub const FAILOVER_NODE_ARGS: &[&str] = &[
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "2000",
];

/// The node options of a cluster whose test freezes a master (SIGSTOP) for several seconds
/// without a failover ([`Cluster::start_patient`]): a node is failing only after 15 s.
pub const PATIENT_NODE_ARGS: &[&str] = &[
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "15000",
];

pub struct Cluster {
    pub nodes: Vec<Server>,
    pub ids: Vec<String>,
    /// The options every node of this cluster starts with, replicas included.
    node_args: &'static [&'static str],
}

#[allow(dead_code)]
/// A cluster of 3 masters and a home spread over 6 holders, with holders on every master and
/// units on every holder; returns the home's master index, the holders (home first) and the
/// total.
pub fn spread_over_masters(cluster: &Cluster, home: &str) -> (usize, Vec<String>, i64) {
    let mut client = cluster.client();
    let home_node = cluster.owner(key_slot(home.as_bytes()));
    let holders = super::names(&client.cmd(&["CTR.SPREAD", home, "6"]));
    let mut masters: Vec<usize> = holders
        .iter()
        .map(|h| cluster.owner(key_slot(h.as_bytes())))
        .collect();
    masters.sort_unstable();
    masters.dedup();
    assert_eq!(masters.len(), 3, "holders on every master: {holders:?}");
    let mut total = 0;
    for (i, h) in holders.iter().enumerate() {
        let delta = 10 * i as i64 + 1;
        client.cmd(&["CTR.ADD", h, &delta.to_string()]);
        total += delta;
    }
    assert_eq!(client.cmd(&["CTR.GET", home]), Value::Int(total));
    (home_node, holders, total)
}

impl Cluster {
    /// `n` masters, the slots split evenly in ranges, every node knowing every other, the
    /// state ok on all of them.
    pub fn start(n: usize, module_args: &[&str]) -> Cluster {
        Cluster::start_each(&vec![module_args; n])
    }

    /// Like [`Cluster::start`], for a test that kills masters and waits for their replicas to
    /// take over: the nodes detect a failure sooner ([`FAILOVER_NODE_ARGS`]).
    pub fn start_for_failovers(n: usize, module_args: &[&str]) -> Cluster {
        Cluster::start_nodes(FAILOVER_NODE_ARGS, &vec![module_args; n])
    }

    /// Like [`Cluster::start`], for a test that freezes a master for a few seconds and must
    /// not see it failed ([`PATIENT_NODE_ARGS`]).
    #[allow(dead_code)]
    pub fn start_patient(n: usize, module_args: &[&str]) -> Cluster {
        Cluster::start_nodes(PATIENT_NODE_ARGS, &vec![module_args; n])
    }

    /// Like [`Cluster::start`], one master per entry, each with its own module load arguments
    /// (e.g. only one master holding transfer credits).
    pub fn start_each(module_args: &[&[&str]]) -> Cluster {
        Cluster::start_nodes(NODE_ARGS, module_args)
    }

    fn start_nodes(node_args: &'static [&'static str], module_args: &[&[&str]]) -> Cluster {
        let n = module_args.len();
        let nodes: Vec<Server> = module_args
            .iter()
            .map(|args| Server::start_with(node_args, args))
            .collect();
        let ids: Vec<String> = nodes
            .iter()
            .map(|s| s.conn().q("CLUSTER MYID").text())
            .collect();
        for (i, node) in nodes.iter().enumerate() {
            // Distinct epochs from the start, as `redis-cli --cluster create` gives them: left
            // at 0, the masters settle their collisions by bumping one another for seconds
            // after the state is ok, and a replica's takeover in that time can claim its
            // master's slots at an epoch the others already hold for that master, which they
            // neither accept nor answer with an UPDATE (seen once: the cluster stayed down).
            let epoch = (i + 1).to_string();
            let reply = node.conn().cmd(&["CLUSTER", "SET-CONFIG-EPOCH", &epoch]);
            assert_eq!(reply, Value::Simple("OK".into()), "SET-CONFIG-EPOCH");
            let first = SLOTS as usize * i / n;
            let last = SLOTS as usize * (i + 1) / n - 1;
            let reply = node.conn().cmd(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ]);
            assert_eq!(reply, Value::Simple("OK".into()), "ADDSLOTSRANGE");
        }
        let mut first = nodes[0].conn();
        for node in &nodes[1..] {
            let reply = first.cmd(&["CLUSTER", "MEET", "127.0.0.1", &node.port.to_string()]);
            assert_eq!(reply, Value::Simple("OK".into()), "MEET");
        }
        let cluster = Cluster {
            nodes,
            ids,
            node_args,
        };
        cluster.wait_settled();
        cluster
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|s| s.port).collect()
    }

    /// Waits until every node says cluster_state:ok, knows every node, and maps every slot to
    /// the same owner as the others.
    pub fn wait_settled(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let maps: Vec<Option<Vec<u16>>> = self
                .nodes
                .iter()
                .map(|s| {
                    let mut c = s.conn();
                    let info = c.q("CLUSTER INFO").text();
                    let ok = info.contains("cluster_state:ok")
                        && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()));
                    if ok {
                        slot_map(&mut c)
                    } else {
                        None
                    }
                })
                .collect();
            if maps.iter().all(Option::is_some) && maps.windows(2).all(|w| w[0] == w[1]) {
                return;
            }
            if Instant::now() > deadline {
                let infos: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|s| s.conn().q("CLUSTER NODES").text())
                    .collect();
                panic!("cluster never settled:\n{}", infos.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The index of the node that owns `slot` (according to node 0).
    pub fn owner(&self, slot: u16) -> usize {
        let map = slot_map(&mut self.nodes[0].conn()).expect("full slot map");
        let port = map[slot as usize];
        self.nodes
            .iter()
            .position(|s| s.port == port)
            .expect("owner is one of ours")
    }

    /// Starts moving `key`'s slot from master `from` to master `to` and migrates the key:
    /// `IMPORTING` on `to`, `MIGRATING` on `from`, then `MIGRATE` of `key` alone.
    #[allow(dead_code)]
    pub fn migrate_key(&self, key: &str, from: usize, to: usize) {
        let ok = Value::Simple("OK".into());
        let slot = key_slot(key.as_bytes()).to_string();
        let (from_id, to_id) = (&self.ids[from], &self.ids[to]);
        let mut src = self.nodes[from].conn();
        let mut dst = self.nodes[to].conn();
        let importing = dst.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", from_id]);
        assert_eq!(importing, ok);
        let migrating = src.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", to_id]);
        assert_eq!(migrating, ok);
        let to_port = self.nodes[to].port.to_string();
        let migrate = [
            "MIGRATE",
            "127.0.0.1",
            &to_port,
            "",
            "0",
            "5000",
            "KEYS",
            key,
        ];
        assert_eq!(src.cmd(&migrate), ok);
    }

    /// Ends a move begun by [`Cluster::migrate_key`]: `key`'s slot is given to master `to` on
    /// every master, the target first, then the source, then the others.
    #[allow(dead_code)]
    pub fn give_slot(&self, key: &str, from: usize, to: usize) {
        let slot = key_slot(key.as_bytes()).to_string();
        let others = (0..self.nodes.len()).filter(|&n| n != to && n != from);
        for node in [to, from].into_iter().chain(others) {
            let reply =
                self.nodes[node]
                    .conn()
                    .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &self.ids[to]]);
            assert_eq!(reply, Value::Simple("OK".into()));
        }
    }

    /// Starts a replica of master `master`, joined to the cluster and in sync. It is not added
    /// to `nodes` (so `wait_settled` keeps counting masters).
    pub fn start_replica_of(&self, master: usize) -> Server {
        let replica = Server::start_with(self.node_args, &[]);
        let mut c = replica.conn();
        let port = self.nodes[0].port.to_string();
        assert_eq!(
            c.cmd(&["CLUSTER", "MEET", "127.0.0.1", &port]),
            Value::Simple("OK".into())
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // REPLICATE needs the master to be known to the new node first.
            if c.cmd(&["CLUSTER", "REPLICATE", &self.ids[master]]) == Value::Simple("OK".into()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica never learned its master"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        replica.wait_link_up();
        self.wait_replica_known(&replica, master);
        replica
    }

    /// Waits until every master lists `replica` as a replica of `master`, and the replica knows
    /// every master and sees the cluster up. A failover needs the votes of the other masters, which they give only to a
    /// replica they know, and gossip spreads the new node from the one it met; a test that kills
    /// that master at once (before, a full sync's 5 s delay left time to spread) would leave a
    /// replica no one votes for.
    fn wait_replica_known(&self, replica: &Server, master: usize) {
        let id = replica.conn().q("CLUSTER MYID").text();
        let lists_it = |nodes: &str| {
            nodes.lines().any(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                fields.len() > 3
                    && fields[0] == id
                    && (fields[2].contains("slave") || fields[2].contains("replica"))
                    && fields[3] == self.ids[master]
            })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let masters_know = self
                .nodes
                .iter()
                .all(|n| lists_it(&n.conn().q("CLUSTER NODES").text()));
            let own = replica.conn().q("CLUSTER NODES").text();
            let knows_masters = self.ids.iter().all(|m| own.contains(m.as_str()));
            // A replica that has not seen the cluster up yet answers CLUSTERDOWN to reads.
            let info = replica.conn().q("CLUSTER INFO").text();
            let up = info.contains("cluster_state:ok");
            // A takeover claims the slots at the replica's current epoch + 1: that beats every
            // master's epoch only once the replica has heard the newest one.
            let epoch = |info: &str| -> Option<u64> {
                info_value(info, "cluster_current_epoch")?.parse().ok()
            };
            let newest = self
                .nodes
                .iter()
                .filter_map(|n| epoch(&n.conn().q("CLUSTER INFO").text()))
                .max();
            let heard = epoch(&info) >= newest;
            if masters_know && knows_masters && up && heard {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the masters never all learned replica {id}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn client(&self) -> ClusterClient {
        ClusterClient::connect(self.nodes[0].port)
    }
}

/// slot -> port of its master, from CLUSTER SLOTS; None while some slot is unassigned.
pub fn slot_map(c: &mut Conn) -> Option<Vec<u16>> {
    let mut map = vec![0u16; SLOTS as usize];
    for range in c.q("CLUSTER SLOTS").array() {
        let range = range.array();
        let (first, last) = (range[0].int() as usize, range[1].int() as usize);
        let port = range[2].array()[1].int() as u16;
        map[first..=last].iter_mut().for_each(|p| *p = port);
    }
    map.iter().all(|&p| p != 0).then_some(map)
}

/// A cluster client that routes every command by its first key (argument 1, where every
/// `CTR.*` and `PNC.*` command has it).
pub struct ClusterClient {
    slots: Vec<u16>,
    conns: HashMap<u16, Conn>,
    /// MOVED replies followed (the slot map is then fixed for that slot).
    pub moved: usize,
    /// ASK replies followed (ASKING, then the command, on the importing node).
    pub asked: usize,
}

impl ClusterClient {
    pub fn connect(seed: u16) -> ClusterClient {
        let mut conn = Conn::connect(seed).expect("connect to a cluster node");
        let slots = slot_map(&mut conn).expect("every slot assigned");
        let mut conns = HashMap::new();
        conns.insert(seed, conn);
        ClusterClient {
            slots,
            conns,
            moved: 0,
            asked: 0,
        }
    }

    /// The port the client currently sends `key`'s commands to.
    pub fn port_for(&self, key: &[u8]) -> u16 {
        self.slots[key_slot(key) as usize]
    }

    pub fn conn(&mut self, port: u16) -> &mut Conn {
        self.conns
            .entry(port)
            .or_insert_with(|| Conn::connect(port).expect("connect to a cluster node"))
    }

    /// Sends a command to the node of its first key, follows MOVED and ASK redirections, and
    /// retries TRYAGAIN (a multi-key command during a slot migration, a purchase waiting for
    /// budget) every 20 ms for up to about 5 s.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Value {
        self.send(args, true)
    }

    /// As [`ClusterClient::cmd`], but a TRYAGAIN is the reply (a test that watches what a
    /// purchase waiting for budget sets going).
    #[allow(dead_code)]
    pub fn cmd_once<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Value {
        self.send(args, false)
    }

    fn send<A: AsRef<[u8]>>(&mut self, args: &[A], wait_tryagain: bool) -> Value {
        let key = args.get(1).map(|a| a.as_ref().to_vec()).unwrap_or_default();
        let mut port = self.port_for(&key);
        let mut asking = false;
        let mut redirections = 0;
        let mut waits = 0;
        let mut trail: Vec<(u16, String)> = Vec::new();
        while redirections < 16 && waits < 250 {
            let conn = self.conn(port);
            if asking {
                assert_eq!(conn.q("ASKING"), Value::Simple("OK".into()));
            }
            let reply = conn.cmd(args);
            let Value::Error(e) = &reply else {
                return reply;
            };
            trail.push((port, e.clone()));
            let words: Vec<&str> = e.split_whitespace().collect();
            match words.as_slice() {
                ["MOVED", slot, addr] => {
                    let slot: usize = slot.parse().expect("MOVED slot");
                    port = parse_port(addr);
                    self.slots[slot] = port;
                    self.moved += 1;
                    asking = false;
                    redirections += 1;
                }
                ["ASK", _slot, addr] => {
                    port = parse_port(addr);
                    self.asked += 1;
                    asking = true;
                    redirections += 1;
                }
                ["TRYAGAIN", ..] if wait_tryagain => {
                    waits += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return reply,
            }
        }
        let last = &trail[trail.len().saturating_sub(8)..];
        panic!(
            "gave up on {:?} after {redirections} redirections and {waits} TRYAGAIN waits; last replies: {last:?}",
            String::from_utf8_lossy(&key),
        );
    }

    pub fn q(&mut self, line: &str) -> Value {
        let args: Vec<&str> = line.split_whitespace().collect();
        self.cmd(&args)
    }
}

fn parse_port(addr: &str) -> u16 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("bad redirection address {addr}"))
}
