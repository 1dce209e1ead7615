//! One question about a key name, asked of the master that serves it: the shape the holder
//! check (does the home of this holder name list it?) and the holder admission (does a key sit
//! at this name?) share. Pure: the runtime sends the requests, reads the local names and wakes
//! the waiting clients; this machine keeps what is asked and what was answered.
//!
//! - **One question per name at a time**: the writes (or grows) that need the same name share
//!   it; the name is asked again only once its question has ended.
//! - **Asked of a destination** (None: this node, whose runtime reads the name from a timer,
//!   outside the command), and again at each resend, of the destination that serves the name
//!   then ([`NameQueries::reroute`]): a failover or a reshard may have moved it.
//! - **An answer ends its question only from the destination asked last**: a late answer of a
//!   master asked before, or a forged one, matches nothing.
//! - **At its deadline** a question ends with nothing concluded ([`NameQueries::expired`]).
//! - **Answers are kept a while** (each machine says how long for each answer, or not at all),
//!   at most `max_answers`: past it an answer is not kept and the name is asked again.

use std::collections::{HashMap, HashSet};

use super::exchange::Exchange;
use super::timeout::Timeout;

/// A question about `name`, asked of `asked` (None: this node), for the client waiting on the
/// key `wake` (woken when it ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query<D> {
    pub name: Vec<u8>,
    pub asked: Option<D>,
    pub wake: Vec<u8>,
}

/// What [`NameQueries::open`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// A new question, under this id: the runtime sends it (or reads the name locally).
    Asked(u64),
    /// The name is being asked already: its answer serves this caller too.
    AlreadyAsked,
    /// Too many questions under way: nothing asked.
    Full,
}

/// The questions of one machine (`D`: a destination, `A`: an answer).
pub struct NameQueries<D, A> {
    exchange: Exchange<Query<D>>,
    asking: HashSet<Vec<u8>>,
    answers: HashMap<Vec<u8>, (A, i64)>,
    max_answers: usize,
}

impl<D: Copy + PartialEq, A: Copy> NameQueries<D, A> {
    /// At most `max_questions` under way and `max_answers` kept.
    pub fn new(max_questions: usize, max_answers: usize) -> NameQueries<D, A> {
        NameQueries {
            exchange: Exchange::new(max_questions),
            asking: HashSet::new(),
            answers: HashMap::new(),
            max_answers,
        }
    }

    /// The answer kept for `name`, while it is trusted at `now`.
    pub fn known(&self, name: &[u8], now: i64) -> Option<A> {
        let (answer, until) = self.answers.get(name)?;
        (*until > now).then_some(*answer)
    }

    /// True when no question is under way.
    pub fn is_empty(&self) -> bool {
        self.exchange.is_empty()
    }

    /// Opens the question `query` at `now`, sent again every `resend_ms` until `deadline_ms`,
    /// unless its name is being asked already. Ids start from `random` (once per life).
    pub fn open(
        &mut self,
        random: impl FnOnce() -> u64,
        query: Query<D>,
        now: i64,
        resend_ms: i64,
        deadline_ms: i64,
    ) -> Opened {
        if self.asking.contains(&query.name) {
            return Opened::AlreadyAsked;
        }
        let name = query.name.clone();
        let resend = Timeout::every(now, resend_ms);
        match self.exchange.open(random, query, resend, deadline_ms) {
            Ok(id) => {
                self.asking.insert(name);
                Opened::Asked(id)
            }
            Err(_) => Opened::Full,
        }
    }

    /// The answer to question `id` came from `from` (None: read on this node): its question,
    /// ended, when `from` is the destination it was asked of last; else None (nothing ends).
    pub fn answered(&mut self, id: u64, from: Option<D>) -> Option<Query<D>> {
        if self.exchange.get(id)?.asked != from {
            return None;
        }
        let query = self.exchange.end(id)?;
        self.asking.remove(&query.name);
        Some(query)
    }

    /// Keeps `answer` for `name` until `until` (a caller that trusts no answer of that kind
    /// keeps nothing). Past `max_answers`, the answers no longer trusted at `now` go first.
    pub fn keep(&mut self, name: &[u8], answer: A, until: i64, now: i64) {
        if self.answers.len() >= self.max_answers {
            self.answers.retain(|_, (_, kept_until)| *kept_until > now);
        }
        if self.answers.len() < self.max_answers {
            self.answers.insert(name.to_vec(), (answer, until));
        }
    }

    /// Takes out the questions past their deadline at `now`: nothing concluded of them.
    pub fn expired(&mut self, now: i64) -> Vec<Query<D>> {
        let expired = self.exchange.expired(now);
        let queries: Vec<Query<D>> = expired.into_iter().map(|(_, q)| q).collect();
        for q in &queries {
            self.asking.remove(&q.name);
        }
        queries
    }

    /// The questions this node answers itself (asked of None): (id, name).
    pub fn local(&self) -> Vec<(u64, Vec<u8>)> {
        let local = self.exchange.iter().filter(|(_, q)| q.asked.is_none());
        local.map(|(id, q)| (id, q.name.clone())).collect()
    }

    /// The questions due a resend at `now`, at most `at_most`, the longest silent first:
    /// (id, the question).
    pub fn due(&mut self, now: i64, at_most: usize) -> Vec<(u64, Query<D>)> {
        let due = self.exchange.due(now, at_most);
        let question = |id| Some((id, self.exchange.get(id)?.clone()));
        due.into_iter().filter_map(question).collect()
    }

    /// Question `id` is now asked of `asked` (the destination serving its name now): only its
    /// answer ends it.
    pub fn reroute(&mut self, id: u64, asked: Option<D>) {
        if let Some(q) = self.exchange.get_mut(id) {
            q.asked = asked;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Queries = NameQueries<u8, bool>;

    fn query(name: &str, asked: Option<u8>) -> Query<u8> {
        Query {
            name: name.as_bytes().to_vec(),
            asked,
            wake: b"home".to_vec(),
        }
    }

    fn asked(q: &mut Queries, name: &str, to: Option<u8>, now: i64) -> u64 {
        match q.open(|| 7, query(name, to), now, 20, now + 1_000) {
            Opened::Asked(id) => id,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_name_is_asked_once_until_its_question_ends() {
        let mut q = Queries::new(10, 10);
        let id = asked(&mut q, "a", Some(1), 0);
        assert_eq!(
            q.open(|| 7, query("a", Some(2)), 5, 20, 100),
            Opened::AlreadyAsked
        );
        assert_eq!(q.answered(id, Some(1)), Some(query("a", Some(1))));
        assert!(q.is_empty());
        assert!(matches!(
            q.open(|| 7, query("a", Some(1)), 6, 20, 100),
            Opened::Asked(_)
        ));
    }

    #[test]
    fn only_the_destination_asked_last_ends_a_question() {
        let mut q = Queries::new(10, 10);
        let id = asked(&mut q, "a", Some(1), 0);
        assert_eq!(q.answered(id, Some(2)), None, "another master");
        assert_eq!(q.answered(id, None), None, "this node");
        assert_eq!(q.answered(id + 1, Some(1)), None, "another id");
        q.reroute(id, Some(3));
        assert_eq!(q.answered(id, Some(1)), None, "the master asked before");
        assert_eq!(q.answered(id, Some(3)).map(|q| q.asked), Some(Some(3)));
        assert_eq!(q.answered(id, Some(3)), None, "a duplicate answer");
    }

    #[test]
    fn a_full_table_asks_nothing() {
        let mut q = Queries::new(1, 10);
        asked(&mut q, "a", Some(1), 0);
        assert_eq!(q.open(|| 7, query("b", Some(1)), 0, 20, 100), Opened::Full);
        assert_eq!(q.local(), Vec::new());
    }

    #[test]
    fn questions_end_at_their_deadline_and_the_name_may_be_asked_again() {
        let mut q = Queries::new(10, 10);
        asked(&mut q, "a", Some(1), 0);
        assert!(q.expired(999).is_empty());
        assert_eq!(q.expired(1_000), vec![query("a", Some(1))]);
        assert!(q.is_empty());
        asked(&mut q, "a", Some(1), 1_000);
    }

    #[test]
    fn local_questions_and_resends_are_handed_out() {
        let mut q = Queries::new(10, 10);
        let here = asked(&mut q, "here", None, 0);
        let there = asked(&mut q, "there", Some(1), 0);
        assert_eq!(q.local(), vec![(here, b"here".to_vec())]);
        assert!(
            q.due(10, 10).is_empty(),
            "not silent for a resend period yet"
        );
        let mut due: Vec<u64> = q.due(20, 10).into_iter().map(|(id, _)| id).collect();
        due.sort_unstable();
        let mut both = vec![here, there];
        both.sort_unstable();
        assert_eq!(due, both);
        assert_eq!(q.due(1_000, 10), Vec::new(), "past the deadline: none");
    }

    #[test]
    fn answers_are_kept_until_their_time_and_bounded() {
        let mut q = Queries::new(10, 2);
        q.keep(b"a", true, 100, 0);
        q.keep(b"b", false, 50, 0);
        assert_eq!(q.known(b"a", 99), Some(true));
        assert_eq!(q.known(b"a", 100), None);
        assert_eq!(q.known(b"b", 10), Some(false));
        q.keep(b"c", true, 200, 10);
        assert_eq!(q.known(b"c", 10), None, "full of answers still trusted");
        q.keep(b"c", true, 200, 60);
        assert_eq!(
            q.known(b"c", 60),
            Some(true),
            "b no longer trusted: room made"
        );
        assert_eq!(q.known(b"b", 10), None);
    }
}
