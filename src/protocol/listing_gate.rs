//! When `CTR.HOLDERS key AT ms` may answer: only from holder lists every online replica of this
//! master holds. A grow or a shrink that a failover loses (made on the master, not yet on the
//! replica promoted) would change the list at the times after it, and a purchase retried from
//! another process would walk another list than its first send did, and could be granted
//! twice. The machine counts the changes this master made (and its role changes and loads,
//! after which its lists are not proven to be on its replicas either), fixes the replication
//! offset to prove at the first ask after a change (the stream as it is then, past every change
//! counted), and opens once the slowest replica has acknowledged it. Per server, not per key:
//! between list changes it costs nothing. The runtime (`crate::runtime::listing_gate`) reads
//! the offsets; the simulator runs the same machine over its replication counts.
//!
//! The gate also dates this master's list changes. A master that took its homes over from
//! another (a replica promoted, a server restarted, a home loaded by `RESTORE`, `MIGRATE` or a
//! slot migration's import) may have a clock behind the one that answered `AT x` before: a
//! change it dated by its own clock could fall before `x` and change the list a retry at `x`
//! walks. So for the clock skew the operator allows (`ctr.clock-skew-ms`) after taking over, it
//! dates its changes after that window: after every `x` the former master could have answered,
//! as long as the two clocks differ by less than the allowance.

/// The gate's state (soft: a restart starts closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingGate {
    /// Changes counted; starts at 1: the lists loaded at start are not proven held.
    changes: u64,
    /// The count the replicas were proven to hold.
    held: u64,
    /// The count being proven, and the offset the replicas must acknowledge.
    proving: Option<(u64, i64)>,
    /// This master's list changes are dated after this time (its clock when it last took
    /// homes over, plus the clock skew allowed).
    dates_after: i64,
}

impl Default for ListingGate {
    fn default() -> ListingGate {
        ListingGate {
            changes: 1,
            held: 0,
            proving: None,
            dates_after: i64::MIN,
        }
    }
}

impl ListingGate {
    /// This server took homes over at `now` (its clock): a role change, a load, a listing
    /// loaded by `RESTORE`, `MIGRATE` or an import. The gate closes (as for [`Self::changed`]),
    /// and the changes it dates from now on are dated after `now + skew_ms`.
    pub fn took_over(&mut self, now: i64, skew_ms: i64) {
        self.changed();
        self.dates_after = self.dates_after.max(now.saturating_add(skew_ms.max(0)));
    }

    /// The clock a list change read at `now` is dated by: `now`, or later within the skew
    /// allowed after a take-over.
    pub fn dating_clock(&self, now: i64) -> i64 {
        now.max(self.dates_after)
    }

    /// A holder list changed here, or the lists may no longer be on the replicas (a role
    /// change, a load): the gate closes until the replicas hold what the stream has then.
    pub fn changed(&mut self) {
        self.changes = self.changes.wrapping_add(1);
    }

    /// True when nothing changed since the replicas were last proven to hold the lists (no
    /// replication state needed).
    pub fn is_open(&self) -> bool {
        self.held == self.changes
    }

    /// True when the replicas hold every change counted: `master_offset` is where this master's
    /// replication stream is now, `acked` what its slowest online replica acknowledged (None
    /// without online replicas: nothing to wait for).
    pub fn open(&mut self, master_offset: i64, acked: Option<i64>) -> bool {
        if self.is_open() {
            return true;
        }
        let offset = match self.proving {
            Some((proving, offset)) if proving == self.changes => offset,
            _ => {
                self.proving = Some((self.changes, master_offset));
                master_offset
            }
        };
        if acked.is_none_or(|acked| acked >= offset) {
            self.held = self.changes;
            self.proving = None;
        }
        self.is_open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_from_start_open_once_the_replicas_acknowledge_the_stream_of_the_first_ask() {
        let mut gate = ListingGate::default();
        assert!(!gate.is_open(), "lists loaded at start are not proven held");
        assert!(!gate.open(100, Some(90)));
        // The offset was fixed at the first ask: later writes do not move it.
        assert!(gate.open(500, Some(100)));
        assert!(gate.is_open());
        assert!(gate.open(900, Some(0)), "open stays open until a change");
    }

    #[test]
    fn a_change_while_proving_asks_for_the_stream_after_it() {
        let mut gate = ListingGate::default();
        assert!(!gate.open(100, Some(50)));
        gate.changed();
        assert!(
            !gate.open(200, Some(100)),
            "the change came after offset 100"
        );
        assert!(gate.open(300, Some(200)));
    }

    #[test]
    fn after_a_take_over_changes_are_dated_past_the_skew_allowed() {
        let mut gate = ListingGate::default();
        assert_eq!(
            gate.dating_clock(1_000),
            1_000,
            "no take-over: its own clock"
        );
        assert!(gate.open(1, None));
        gate.took_over(1_000, 500);
        assert!(!gate.is_open(), "a take-over closes the gate");
        assert_eq!(gate.dating_clock(1_200), 1_500);
        assert_eq!(
            gate.dating_clock(1_501),
            1_501,
            "past the window: its own clock"
        );
        // A later take-over never moves the date back; a negative allowance counts as 0.
        gate.took_over(900, -5);
        assert_eq!(gate.dating_clock(1_000), 1_500);
    }

    #[test]
    fn without_replicas_nothing_is_waited_for() {
        let mut gate = ListingGate::default();
        gate.changed();
        assert!(gate.open(7, None));
        gate.changed();
        assert!(!gate.is_open());
        assert!(gate.open(8, None));
    }
}
