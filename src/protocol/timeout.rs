//! The one timeout type of the spread node (as TigerBeetle has one): when something is due
//! next, and how long to wait after that. A fixed period waits the same each time; a backoff
//! doubles its wait up to a cap, so a master that stays silent is asked a few times, not ten
//! times a second. Times are the caller's milliseconds: the runtime's clock, or the simulator's.

/// When something is due, and the wait that follows each firing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeout {
    due_ms: i64,
    /// The wait after the next firing.
    wait_ms: i64,
    max_wait_ms: i64,
}

impl Timeout {
    /// Never due (a request not sent yet, a request never resent).
    pub const NEVER: Timeout = Timeout {
        due_ms: i64::MAX,
        wait_ms: i64::MAX,
        max_wait_ms: i64::MAX,
    };

    /// Due every `period_ms` from `now` (at least 1 ms).
    pub fn every(now: i64, period_ms: i64) -> Timeout {
        let period_ms = period_ms.max(1);
        Timeout::every_from(now.saturating_add(period_ms), period_ms)
    }

    /// Due `first_ms` after `now`, then after twice the previous wait, at most `max_wait_ms`.
    pub fn backoff(now: i64, first_ms: i64, max_wait_ms: i64) -> Timeout {
        let first_ms = first_ms.max(1);
        let max_wait_ms = max_wait_ms.max(first_ms);
        Timeout {
            due_ms: now.saturating_add(first_ms),
            wait_ms: first_ms.saturating_mul(2).min(max_wait_ms),
            max_wait_ms,
        }
    }

    /// Due at `due_ms`, then every `period_ms` after each firing.
    pub fn every_from(due_ms: i64, period_ms: i64) -> Timeout {
        let period_ms = period_ms.max(1);
        Timeout {
            due_ms,
            wait_ms: period_ms,
            max_wait_ms: period_ms,
        }
    }

    /// Due at once, then after `first_ms`, then after twice the previous wait, at most
    /// `max_wait_ms` (something to send now and resend until answered).
    pub fn backoff_from_now(first_ms: i64, max_wait_ms: i64) -> Timeout {
        let first_ms = first_ms.max(1);
        Timeout {
            due_ms: i64::MIN,
            wait_ms: first_ms,
            max_wait_ms: max_wait_ms.max(first_ms),
        }
    }

    /// Due at once, keeping its backoff (something new to send: it goes now, and a silence
    /// after it still waits as long as the silence before).
    pub fn hurry(&mut self) {
        if *self != Timeout::NEVER {
            self.due_ms = i64::MIN;
        }
    }

    /// True when it is due at `now`.
    pub fn fired(&self, now: i64) -> bool {
        now >= self.due_ms
    }

    /// When it is due next (`i64::MAX`: never).
    pub fn due_ms(&self) -> i64 {
        self.due_ms
    }

    /// It fired at `now` (the thing was done): due again after the next wait.
    pub fn fire(&mut self, now: i64) {
        if *self == Timeout::NEVER {
            return;
        }
        let wait = self.wait_ms;
        self.due_ms = now.saturating_add(wait);
        self.wait_ms = wait.saturating_mul(2).min(self.max_wait_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_doubles_its_wait_up_to_the_cap() {
        let mut t = Timeout::backoff(1_000, 100, 1_000);
        assert_eq!(t.due_ms(), 1_100);
        assert!(!t.fired(1_099) && t.fired(1_100));
        let mut dues = Vec::new();
        let mut now = 1_100;
        for _ in 0..6 {
            t.fire(now);
            now = t.due_ms();
            dues.push(now);
        }
        assert_eq!(dues, [1_300, 1_700, 2_500, 3_500, 4_500, 5_500]);
    }

    #[test]
    fn a_backoff_from_now_is_due_at_once_and_a_hurry_keeps_the_wait() {
        let mut t = Timeout::backoff_from_now(100, 2_000);
        assert!(t.fired(i64::MIN + 1));
        let mut waits = Vec::new();
        for now in [0, 1_000, 2_000, 3_000, 4_000, 5_000, 6_000] {
            t.fire(now);
            waits.push(t.due_ms() - now);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1_600, 2_000, 2_000]);
        t.hurry();
        assert!(t.fired(0));
        t.fire(10_000);
        assert_eq!(t.due_ms(), 12_000, "the backoff is kept");
        let mut never = Timeout::NEVER;
        never.hurry();
        assert!(!never.fired(0));
    }

    #[test]
    fn a_period_from_a_given_time_is_due_then_and_every_period_after() {
        let mut t = Timeout::every_from(500, 100);
        assert!(!t.fired(499) && t.fired(500));
        t.fire(520);
        assert_eq!(t.due_ms(), 620);
    }

    #[test]
    fn a_period_waits_the_same_each_time_from_when_it_fired() {
        let mut t = Timeout::every(0, 100);
        t.fire(130); // fired late: the next wait counts from the firing
        assert_eq!(t.due_ms(), 230);
        t.fire(230);
        assert_eq!(t.due_ms(), 330);
    }

    #[test]
    fn never_stays_never_and_extremes_saturate() {
        let mut never = Timeout::NEVER;
        never.fire(5);
        assert!(!never.fired(i64::MAX - 1));
        let mut t = Timeout::backoff(i64::MAX - 10, 100, i64::MAX);
        assert_eq!(t.due_ms(), i64::MAX);
        t.fire(i64::MAX - 1);
        assert_eq!(t.due_ms(), i64::MAX);
        assert_eq!(
            Timeout::every(0, 0).due_ms(),
            1,
            "a period is at least 1 ms"
        );
    }
}
