//! The one request/response exchange of the spread node. A machine that asks other masters
//! (the gather, the holder check, the budget poll) keeps its pending requests here:
//! - **ids from a random start**, so that a late answer to an earlier life of this node (a
//!   restart, a module reloaded) matches nothing new;
//! - **matching**: an answer ends only the request of its id, once; a duplicate, late or
//!   forged answer matches nothing;
//! - **resends**: each request's [`Timeout`]; [`Exchange::due`] hands out the requests due a
//!   resend, the longest silent first and at most a bound per call, so a flood of requests
//!   cannot starve the same ones, and backs each off;
//! - **deadlines**: [`Exchange::expired`] takes out the requests past theirs;
//! - **a bound**: past `limit` pending requests, [`Exchange::open`] refuses (the caller goes on
//!   without asking, or fails the command).
//!
//! What a request carries, where it is sent and what its answer means stay with its machine.

use std::collections::HashMap;

use super::timeout::Timeout;

/// A pending request, with its resend timeout and deadline.
struct Pending<R> {
    request: R,
    resend: Timeout,
    deadline_ms: i64,
}

/// The pending requests of one machine, by id.
pub struct Exchange<R> {
    /// The next id to hand out (0: not drawn yet).
    next_id: u64,
    pending: HashMap<u64, Pending<R>>,
    limit: usize,
}

/// An exchange without a bound of its own.
impl<R> Default for Exchange<R> {
    fn default() -> Exchange<R> {
        Exchange::new(usize::MAX)
    }
}

impl<R> Exchange<R> {
    /// An empty exchange of at most `limit` pending requests.
    pub fn new(limit: usize) -> Exchange<R> {
        Exchange {
            next_id: 0,
            pending: HashMap::new(),
            limit,
        }
    }

    /// A fresh id (never 0). The first is drawn from `random` (called once per life).
    pub fn draw_id(&mut self, random: impl FnOnce() -> u64) -> u64 {
        if self.next_id == 0 {
            self.next_id = random().max(1);
        }
        let id = self.next_id;
        self.next_id = id.wrapping_add(1).max(1);
        id
    }

    /// True when another request may be opened.
    pub fn has_room(&self) -> bool {
        self.pending.len() < self.limit
    }

    /// Opens a request under a fresh id (see [`Exchange::draw_id`]); the request back when the
    /// exchange is full.
    pub fn open(
        &mut self,
        random: impl FnOnce() -> u64,
        request: R,
        resend: Timeout,
        deadline_ms: i64,
    ) -> Result<u64, R> {
        if !self.has_room() {
            return Err(request);
        }
        Ok(self.open_unbounded(random, request, resend, deadline_ms))
    }

    /// Opens a request past any bound: for a machine that bounds what it asks itself.
    pub fn open_unbounded(
        &mut self,
        random: impl FnOnce() -> u64,
        request: R,
        resend: Timeout,
        deadline_ms: i64,
    ) -> u64 {
        let id = self.draw_id(random);
        self.pending.insert(
            id,
            Pending {
                request,
                resend,
                deadline_ms,
            },
        );
        id
    }

    /// The pending request `id`.
    pub fn get(&self, id: u64) -> Option<&R> {
        self.pending.get(&id).map(|p| &p.request)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut R> {
        self.pending.get_mut(&id).map(|p| &mut p.request)
    }

    /// Replaces the resend timeout of `id` (a request sent for the first time now).
    pub fn set_resend(&mut self, id: u64, resend: Timeout) {
        if let Some(p) = self.pending.get_mut(&id) {
            p.resend = resend;
        }
    }

    /// When `id` is due a resend next.
    pub fn resend_due_ms(&self, id: u64) -> Option<i64> {
        self.pending.get(&id).map(|p| p.resend.due_ms())
    }

    /// Ends request `id` (answered, or given up by its machine): its request, once. None for
    /// an id not pending: a duplicate, late or unknown answer.
    pub fn end(&mut self, id: u64) -> Option<R> {
        self.pending.remove(&id).map(|p| p.request)
    }

    /// The requests due a resend at `now` and not past their deadline, the longest silent
    /// first, at most `at_most` (the others at a later call); each is backed off from `now`.
    pub fn due(&mut self, now: i64, at_most: usize) -> Vec<u64> {
        let mut due: Vec<(i64, u64)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.resend.fired(now) && p.deadline_ms > now)
            .map(|(&id, p)| (p.resend.due_ms(), id))
            .collect();
        due.sort_unstable();
        due.truncate(at_most);
        for (_, id) in &due {
            if let Some(p) = self.pending.get_mut(id) {
                p.resend.fire(now);
            }
        }
        due.into_iter().map(|(_, id)| id).collect()
    }

    /// Takes out the requests whose deadline is at or before `now`, in id order.
    pub fn expired(&mut self, now: i64) -> Vec<(u64, R)> {
        let mut ids: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline_ms <= now)
            .map(|(&id, _)| id)
            .collect();
        ids.sort_unstable();
        ids.into_iter()
            .filter_map(|id| Some((id, self.end(id)?)))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Every pending request, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &R)> {
        self.pending.iter().map(|(&id, p)| (id, &p.request))
    }

    pub fn contains(&self, id: u64) -> bool {
        self.pending.contains_key(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(
        x: &mut Exchange<&'static str>,
        r: &'static str,
        resend: Timeout,
        deadline: i64,
    ) -> u64 {
        x.open(|| 41, r, resend, deadline).unwrap()
    }

    #[test]
    fn ids_start_from_the_random_draw_once_and_never_are_zero() {
        let mut x: Exchange<()> = Exchange::new(10);
        let mut draws = 0;
        let a = x.draw_id(|| {
            draws += 1;
            u64::MAX
        });
        let b = x.draw_id(|| unreachable!("drawn once per life"));
        assert_eq!((a, b, draws), (u64::MAX, 1, 1), "wraps past 0");
        let mut zero: Exchange<()> = Exchange::new(10);
        assert_eq!(zero.draw_id(|| 0), 1);
    }

    #[test]
    fn an_answer_ends_its_request_once_and_a_stranger_matches_nothing() {
        let mut x = Exchange::new(10);
        let id = open(&mut x, "check", Timeout::NEVER, 1_000);
        assert_eq!(x.end(id.wrapping_add(7)), None);
        assert_eq!(x.end(id), Some("check"));
        assert_eq!(x.end(id), None, "a duplicate answer");
        assert!(x.is_empty());
    }

    #[test]
    fn resends_go_to_the_longest_silent_first_within_the_bound_then_back_off() {
        let mut x = Exchange::new(10);
        let old = open(&mut x, "old", Timeout::every(0, 100), 10_000);
        let new = open(&mut x, "new", Timeout::every(50, 100), 10_000);
        let none = open(&mut x, "never", Timeout::NEVER, 10_000);
        assert!(x.due(99, 10).is_empty());
        assert_eq!(x.due(160, 1), [old], "the bound leaves the other for later");
        assert_eq!(x.due(160, 10), [new]);
        assert!(
            x.due(200, 10).is_empty(),
            "each backed off from when it was resent"
        );
        assert_eq!(x.due(260, 10), [old, new]);
        assert!(x.contains(none));
    }

    #[test]
    fn a_request_past_its_deadline_is_taken_out_and_never_resent() {
        let mut x = Exchange::new(10);
        let late = open(&mut x, "late", Timeout::every(0, 10), 100);
        let live = open(&mut x, "live", Timeout::every(0, 10), 1_000);
        assert_eq!(
            x.due(100, 10),
            [live],
            "a request at its deadline is not resent"
        );
        assert_eq!(x.expired(100), [(late, "late")]);
        assert_eq!(x.expired(100), []);
        assert_eq!(x.get(live), Some(&"live"));
    }

    #[test]
    fn a_full_exchange_refuses_without_drawing_an_id() {
        let mut x = Exchange::new(1);
        let first = open(&mut x, "a", Timeout::NEVER, 1);
        assert_eq!(x.open(|| 41, "b", Timeout::NEVER, 1), Err("b"));
        x.end(first);
        assert_eq!(x.open(|| 41, "c", Timeout::NEVER, 1), Ok(first + 1));
    }
}
