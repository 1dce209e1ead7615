//! What a master's replicas hold: its replication stream's offset and the slowest online
//! replica's acknowledged one (read by the runtime from `INFO replication`, counted by the
//! simulator), and the gate of a send that waits until the replicas hold the write before it.

/// Where this master's replication stream is, and how far its slowest online replica has
/// acknowledged it (None without online replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replication {
    pub master_offset: i64,
    pub slowest_replica: Option<i64>,
}

impl Replication {
    /// True when every online replica holds what was written up to `offset`.
    pub fn holds(&self, offset: i64) -> bool {
        self.slowest_replica.is_none_or(|acked| acked >= offset)
    }
}

/// Parses the text of `INFO replication`. None when `master_repl_offset` is missing.
pub fn parse_info(text: &str) -> Option<Replication> {
    let mut master_offset = None;
    let mut slowest_replica: Option<i64> = None;
    for line in text.lines() {
        let Some((field, value)) = line.trim_end().split_once(':') else {
            continue;
        };
        if field == "master_repl_offset" {
            master_offset = value.parse().ok();
        } else if field.starts_with("slave") && field[5..].bytes().all(|b| b.is_ascii_digit()) {
            let mut online = false;
            let mut offset = None;
            for part in value.split(',') {
                match part.split_once('=') {
                    Some(("state", state)) => online = state == "online",
                    Some(("offset", o)) => offset = o.parse::<i64>().ok(),
                    _ => {}
                }
            }
            if online {
                // An online replica whose offset cannot be read holds nothing we can prove.
                let acked = offset.unwrap_or(-1);
                slowest_replica = Some(slowest_replica.map_or(acked, |s| s.min(acked)));
            }
        }
    }
    Some(Replication {
        master_offset: master_offset?,
        slowest_replica,
    })
}

/// A send that waits until the replicas hold the write before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gate {
    /// The offset the replicas must reach, fixed at the first tick after the write.
    offset: Option<i64>,
}

impl Gate {
    /// True when the send may go now; the first call fixes the offset to wait for.
    pub fn open(&mut self, now: &Replication) -> bool {
        let offset = *self.offset.get_or_insert(now.master_offset);
        now.holds(offset)
    }
}

/// Takes out of `held` every item whose gate the replicas' state `now` opens (an item seen for
/// the first time fixes its gate's offset), keeping the others in order.
pub fn take_open<T>(
    held: &mut Vec<T>,
    now: &Replication,
    gate: impl Fn(&mut T) -> &mut Gate,
) -> Vec<T> {
    let mut ready = Vec::new();
    let mut kept = Vec::with_capacity(held.len());
    for mut item in held.drain(..) {
        if gate(&mut item).open(now) {
            ready.push(item);
        } else {
            kept.push(item);
        }
    }
    *held = kept;
    ready
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=127.0.0.1,port=7003,state=online,offset=1500,lag=0\r\n\
        slave1:ip=127.0.0.1,port=7004,state=online,offset=1200,lag=1\r\n\
        master_failover_state:no-failover\r\nmaster_repl_offset:1600\r\n";

    #[test]
    fn the_slowest_online_replica_decides() {
        let r = parse_info(INFO).unwrap();
        assert_eq!(r.master_offset, 1600);
        assert_eq!(r.slowest_replica, Some(1200));
        assert!(r.holds(1200) && !r.holds(1201));
    }

    #[test]
    fn replicas_still_syncing_are_not_waited_for_and_none_means_nothing_to_wait_for() {
        let syncing = INFO.replace("port=7004,state=online", "port=7004,state=wait_bgsave");
        assert_eq!(parse_info(&syncing).unwrap().slowest_replica, Some(1500));
        let alone = "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:42\r\n";
        let r = parse_info(alone).unwrap();
        assert_eq!(r.slowest_replica, None);
        assert!(r.holds(i64::MAX));
        assert_eq!(parse_info("role:master\r\n"), None);
    }

    #[test]
    fn only_the_items_whose_gate_opens_are_taken_the_rest_kept_in_order() {
        let r = Replication {
            master_offset: 100,
            slowest_replica: Some(50),
        };
        let fixed = |offset| Gate {
            offset: Some(offset),
        };
        let mut held = vec![
            (1, fixed(40)),
            (2, fixed(60)),
            (3, fixed(50)),
            (4, fixed(70)),
        ];
        let ready = take_open(&mut held, &r, |h| &mut h.1);
        assert_eq!(ready.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(held.iter().map(|h| h.0).collect::<Vec<_>>(), [2, 4]);
    }

    #[test]
    fn a_gate_waits_for_the_offset_of_its_first_tick() {
        let mut gate = Gate::default();
        let early = Replication {
            master_offset: 100,
            slowest_replica: Some(90),
        };
        assert!(!gate.open(&early));
        let later = Replication {
            master_offset: 500,
            slowest_replica: Some(100),
        };
        assert!(
            gate.open(&later),
            "the offset was fixed at the first tick, 100"
        );
        assert!(Gate::default().open(&Replication {
            master_offset: 7,
            slowest_replica: None
        }));
    }
}
