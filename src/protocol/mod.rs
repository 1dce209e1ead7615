//! The spread node's protocol machinery that is not a counter rule: plain Rust with no Redis
//! API and no globals, driven by the runtime (`src/runtime`: its timers and bus receivers), by
//! the simulator and by unit tests. `timeout.rs` is the one timeout type (a deadline, or a resend that backs off);
//! `exchange.rs` the one request/response exchange (ids from a random start, matching,
//! deadlines, resends) that the gather, the holder check and the budget poll each own;
//! `gather.rs` the gather's table (rounds shared by the reads of a home, settled into the
//! reads' values); `name_queries.rs` one question about a key name asked of the master serving
//! it (the holder check's and the holder admission's); `messages.rs` the one table of bus message kinds (byte, receiving machine, whether it
//! writes); `listing_gate.rs` when `CTR.HOLDERS ... AT` may answer (the replicas hold the
//! lists) and the clock list changes are dated by after a take-over; `replicas.rs` what a master's replicas hold and the gate of a send that waits for
//! them; `host.rs` the one `Host` a machine runs on (the runtime's server, or the simulator's
//! masters); `transfer_node.rs` one node's part of the transfer protocol (what each message does,
//! the registry of keys with something to send, resends, acknowledgements held for the replicas);
//! `collect_node.rs` one node's part of collecting a gone home's holders; `audit_node.rs` one
//! master's part of the orphan audit (questions asked and answered, reports, the operator's
//! deletions); `rebalance_node.rs` one master's part of moving budget toward demand (polls,
//! answers, gives, the whole headroom told), over what it remembers (`demand_book.rs`);
//! `holder_check_node.rs` one node's part of the holder check (the asker's questions, the
//! home side's verdict); `admission_node.rs` one node's part of the holder admission (a grow's
//! planned names asked of their masters, their answers).

pub mod admission_node;
pub mod audit_node;
pub mod collect_node;
pub mod demand_book;
pub mod exchange;
pub mod gather;
pub mod gather_node;
pub mod holder_check_node;
pub mod host;
pub mod listing_gate;
pub mod messages;
pub mod name_queries;
pub mod rebalance_node;
pub mod replicas;
pub mod timeout;
pub mod transfer_node;
