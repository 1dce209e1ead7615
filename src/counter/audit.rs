//! The orphan audit, the pure rules (the glue is `crate::runtime::spread_audit`, the bus
//! payloads `crate::persist::audit_msg`): the backstop of collections (`collect`).
//!
//! A collection lives in the memory of the master that saw the home go. It is lost when that
//! master restarts from an RDB alone, when a `FLUSHALL`'s master fails over before its claims
//! went, and it gives up on a holder whose master does not answer within
//! `ctr.collect-timeout-ms`. The audit finds such holders from their own side: every master
//! walks its keys, and for every holder of a spread (a counter whose name carries a spread id,
//! without an expiry: a holder with one goes by itself, like a folded holder kept for the token
//! window) asks the master serving the slot of the home name it carries whether that spread
//! still lives there.
//!
//! - [`answer`]: the home side. `Lives` when a counter of that slot is a home of the spread
//!   (under the carried name or any other: `RENAME`, `RESTORE` and `MIGRATE` keep a home in its
//!   slot); `Gone` only when this node serves the slot as a master, nothing is moving it, and
//!   every key of the slot was read; anything else is `Unsure` (asked again later). The glue
//!   sends a `Gone` only once this master's replicas hold the state it read (a failover must
//!   not bring back a home whose holders went).
//! - [`Audit`]: the holder side. A spread answered `Gone` twice, the second time at least
//!   `grace` after the first (`ctr.orphan-grace-ms`: a home restored after its holders, by a
//!   tool that copies keys in any order, comes within it), is *reported*, never deleted: an
//!   answer is absence, and absence is no proof that a spread ended (a reshard cancelled after
//!   its `MIGRATE`, a failover that lost a migration's state leave a living home where its
//!   slot's master cannot see it). Its holders stay, listed by [`Audit::orphans`] until a
//!   later answer finds the home again (`Lives`), or an operator deletes them
//!   ([`Audit::take_orphans`], with the receiver's rule of collections: exactly that spread id
//!   and carried home, a counter of this module). A leak is reported; a loss never happens.
//!
//! Bounded: at most [`MAX_SUSPECTS`] spreads and [`MAX_SUSPECT_BYTES`] of names are followed at
//! once (the rest wait for a later pass); a spread not seen again in a whole pass is forgotten.

use std::collections::BTreeMap;

use super::collect::Collection;
use super::spread::parse_holder_name;
use super::Counter;

/// What the master serving a home name's slot says of a spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A home of the spread is there: its holders stay.
    Lives,
    /// No key of the slot is a home of the spread, read by its master with nothing moving.
    Gone,
    /// Nothing can be said now (not a master of the slot, the slot moving, the cluster down,
    /// too many keys to read): asked again later.
    Unsure,
}

impl Answer {
    pub fn code(self) -> u8 {
        match self {
            Answer::Lives => 0,
            Answer::Gone => 1,
            Answer::Unsure => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<Answer> {
        match code {
            0 => Some(Answer::Lives),
            1 => Some(Answer::Gone),
            2 => Some(Answer::Unsure),
            _ => None,
        }
    }
}

/// The home side's rule. `serves`: this node serves the home name's slot as a master and
/// nothing is moving it; `home_found`: whether a key of that slot is a home of the spread,
/// None when the slot's keys could not all be read.
pub fn answer(serves: bool, home_found: Option<bool>) -> Answer {
    match (serves, home_found) {
        (false, _) | (true, None) => Answer::Unsure,
        (true, Some(true)) => Answer::Lives,
        (true, Some(false)) => Answer::Gone,
    }
}

/// True when the home side's answers to one ask must wait for this master's replicas to hold
/// every write made before them: a `Gone` is read from an absence, and a failover to a
/// replica that had not yet received the write making it (a `DEL` of the home) would bring
/// the home back after its holders went on that answer. `Lives` and `Unsure` go at once.
pub fn answers_wait_for_replicas(answers: &[(Question, Answer)]) -> bool {
    answers.iter().any(|(_, a)| *a == Answer::Gone)
}

/// What the walk asks about the holder `name` holding `c` (None: an inline counter, no
/// transfer state), when it has no expiry; None when it is not a holder of a spread with an
/// id. The spread id is its name's; the home is the one it was sealed into when it was folded,
/// else the one its name carries (a sealed holder renamed by a user carries another name in
/// its new name, while its fold still goes to its own home). What it may have in flight does
/// not matter: once its spread is gone a fold credit has no home to land on, and a budget
/// move toward another spread is refused there (a receiver applies only transfers it
/// expects), so deleting it loses no unit that counts anywhere.
pub fn question_for(name: &[u8], c: Option<&Counter>) -> Option<Question> {
    let h = parse_holder_name(name).filter(|h| h.spread_id != 0)?;
    let sealed_into = c
        .and_then(Counter::transfers)
        .and_then(|t| t.sealed_into.as_deref());
    Some(Question {
        spread_id: h.spread_id,
        home: sealed_into.unwrap_or(h.home).to_vec(),
    })
}

/// The question about one spread: its id and the home name its holders carry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Question {
    pub spread_id: u64,
    pub home: Vec<u8>,
}

/// Spreads followed at most.
pub const MAX_SUSPECTS: usize = 10_000;
/// Bytes of names followed at most.
pub const MAX_SUSPECT_BYTES: usize = 8 << 20;
/// How long an asked question waits for its answer before it is asked again.
pub const ASK_TIMEOUT_MS: i64 = 5_000;
/// How long an `Unsure` waits before it is asked again.
pub const RETRY_MS: i64 = 1_000;
/// How often a reported spread is asked again (a home that comes back clears the report).
pub const REPORTED_RECHECK_MS: i64 = 10_000;

struct Suspect<D> {
    holders: Vec<Vec<u8>>,
    /// Whom its question went to last, until that master's answer comes: an answer from any
    /// other (a master asked before a reshard or a failover, a forged one) or a second copy of
    /// it is no answer to this question.
    asked: Option<D>,
    /// When the first `Gone` came.
    gone_since: Option<i64>,
    /// When to ask (again).
    next_ms: i64,
    /// The pass that last saw one of its holders.
    seen_pass: u64,
    /// When it was reported as an orphan (gone past the grace).
    reported_since: Option<i64>,
}

fn suspect_bytes(home: &[u8], holders: &[Vec<u8>]) -> usize {
    home.len() + 64 + holders.iter().map(|h| h.len() + 32).sum::<usize>()
}

/// The holder side: the spreads this master holds holders of, and where each question stands
/// (`D`: the master a question is asked of).
pub struct Audit<D> {
    suspects: BTreeMap<Question, Suspect<D>>,
    bytes: usize,
    pass: u64,
}

impl<D> Default for Audit<D> {
    fn default() -> Self {
        Audit {
            suspects: BTreeMap::new(),
            bytes: 0,
            pass: 0,
        }
    }
}

impl<D: PartialEq> Audit<D> {
    pub fn len(&self) -> usize {
        self.suspects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.suspects.is_empty()
    }

    /// True when a master answered the spread `spread_id` gone and no answer since found it.
    pub fn suspects_gone(&self, spread_id: u64) -> bool {
        (self.suspects.iter()).any(|(q, s)| q.spread_id == spread_id && s.gone_since.is_some())
    }

    /// The walk found the holder `name`, asked about with `q` ([`question_for`]). False when
    /// the bounds are reached.
    pub fn saw(&mut self, q: Question, name: &[u8], now: i64) -> bool {
        let pass = self.pass;
        if let Some(s) = self.suspects.get_mut(&q) {
            s.seen_pass = pass;
            if !s.holders.iter().any(|n| n == name) {
                if self.bytes + name.len() + 32 > MAX_SUSPECT_BYTES {
                    return false;
                }
                self.bytes += name.len() + 32;
                s.holders.push(name.to_vec());
            }
            return true;
        }
        let holders = vec![name.to_vec()];
        let size = suspect_bytes(&q.home, &holders);
        if self.suspects.len() >= MAX_SUSPECTS || self.bytes + size > MAX_SUSPECT_BYTES {
            return false;
        }
        self.bytes += size;
        self.suspects.insert(
            q,
            Suspect {
                holders,
                asked: None,
                gone_since: None,
                next_ms: now,
                seen_pass: pass,
                reported_since: None,
            },
        );
        true
    }

    /// A walk of every key ended: spreads none of whose holders it saw are forgotten (their
    /// holders went some other way).
    pub fn end_pass(&mut self) {
        let pass = self.pass;
        let mut freed = 0;
        self.suspects.retain(|q, s| {
            let keep = s.seen_pass == pass;
            if !keep {
                freed += suspect_bytes(&q.home, &s.holders);
            }
            keep
        });
        self.bytes -= freed;
        self.pass += 1;
    }

    /// The questions to ask now, at most `max` (each then waits [`ASK_TIMEOUT_MS`] for its
    /// answer; the rest wait for a later call).
    pub fn due(&mut self, now: i64, max: usize) -> Vec<Question> {
        let mut out = Vec::new();
        for (q, s) in &mut self.suspects {
            if out.len() >= max {
                break;
            }
            if s.next_ms <= now {
                s.next_ms = now.saturating_add(ASK_TIMEOUT_MS);
                out.push(q.clone());
            }
        }
        out
    }

    /// The question `q` ([`Self::due`]) went to `master`: only that master's answer ends it.
    pub fn asked(&mut self, q: &Question, master: D) {
        if let Some(s) = self.suspects.get_mut(q) {
            s.asked = Some(master);
        }
    }

    /// An answer came from `from`. It counts only as the answer to the question last asked of
    /// `from`, once. True when it reports the spread as an orphan for the first time (gone
    /// twice, the second answer past the grace); its holders stay until [`Self::take_orphans`].
    pub fn answered(
        &mut self,
        q: &Question,
        from: &D,
        answer: Answer,
        now: i64,
        grace: i64,
    ) -> bool {
        let Some(s) = self.suspects.get_mut(q) else {
            return false;
        };
        if s.asked.as_ref() != Some(from) {
            return false;
        }
        s.asked = None;
        match answer {
            Answer::Lives => {
                self.forget(q);
                false
            }
            Answer::Unsure => {
                s.next_ms = now.saturating_add(RETRY_MS);
                false
            }
            Answer::Gone => {
                let since = *s.gone_since.get_or_insert(now);
                if now.saturating_sub(since) < grace {
                    s.next_ms = since.saturating_add(grace);
                    return false;
                }
                s.next_ms = now.saturating_add(REPORTED_RECHECK_MS.max(grace));
                let first = s.reported_since.is_none();
                s.reported_since.get_or_insert(now);
                first
            }
        }
    }

    /// The spreads reported as orphans: (question, holders here, reported since).
    pub fn orphans(&self) -> impl Iterator<Item = (&Question, &[Vec<u8>], i64)> {
        self.suspects
            .iter()
            .filter_map(|(q, s)| s.reported_since.map(|t| (q, s.holders.as_slice(), t)))
    }

    /// How many spreads are reported as orphans now.
    pub fn orphan_count(&self) -> usize {
        self.orphans().count()
    }

    /// An operator's order: the reported orphans of `spread_id` are handed over for deletion
    /// (each name to delete only if [`question_for`] it is still the collection's question,
    /// read again) and forgotten. Empty when that spread is not reported here.
    pub fn take_orphans(&mut self, spread_id: u64) -> Vec<Collection> {
        let reported: Vec<Question> = self
            .orphans()
            .filter(|(q, _, _)| q.spread_id == spread_id)
            .map(|(q, _, _)| q.clone())
            .collect();
        reported
            .into_iter()
            .filter_map(|q| {
                let s = self.forget(&q)?;
                Some(Collection {
                    spread_id: q.spread_id,
                    home: q.home,
                    holders: s.holders,
                })
            })
            .collect()
    }

    fn forget(&mut self, q: &Question) -> Option<Suspect<D>> {
        let s = self.suspects.remove(q)?;
        self.bytes -= suspect_bytes(&q.home, &s.holders);
        Some(s)
    }

    /// Everything followed is dropped (this node is no longer a master).
    pub fn clear(&mut self) {
        self.suspects.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::spread::holder_name;

    /// The audit of a test: questions asked of masters numbered 0, 1, ...
    type Audit = super::Audit<u8>;

    /// What the walk does with a name holding an inline counter.
    fn see(a: &mut Audit, name: &[u8], now: i64) -> bool {
        question_for(name, None).is_some_and(|q| a.saw(q, name, now))
    }

    /// The questions due now, each asked of master 1.
    fn ask(a: &mut Audit, now: i64) -> Vec<Question> {
        let due = a.due(now, usize::MAX);
        for q in &due {
            a.asked(q, 1);
        }
        due
    }

    /// Master 1's answer.
    fn answered_by_1(a: &mut Audit, id: u64, answer: Answer, now: i64, grace: i64) -> bool {
        a.answered(&question(id), &1, answer, now, grace)
    }

    fn question(id: u64) -> Question {
        Question {
            spread_id: id,
            home: b"{p}views".to_vec(),
        }
    }

    #[test]
    fn only_holders_of_a_spread_with_an_id_are_followed_once_each() {
        let mut a = Audit::default();
        assert!(!see(&mut a, b"plain", 0));
        assert!(
            !see(&mut a, b"{ctr.1.0}views", 0),
            "a spread made before ids"
        );
        let h1 = holder_name(b"{p}views", 7, 1, 0);
        let h2 = holder_name(b"{p}views", 7, 2, 0);
        assert!(see(&mut a, &h1, 0) && see(&mut a, &h2, 0) && see(&mut a, &h1, 0));
        assert_eq!(a.len(), 1);
        assert_eq!(ask(&mut a, 0), vec![question(7)]);
        assert!(ask(&mut a, 1).is_empty(), "asked: waits for its answer");
        assert_eq!(
            ask(&mut a, ASK_TIMEOUT_MS),
            vec![question(7)],
            "asked again"
        );
    }

    #[test]
    fn a_living_spread_is_forgotten_and_an_unsure_one_asked_again() {
        let mut a = Audit::default();
        see(&mut a, &holder_name(b"{p}views", 7, 1, 0), 0);
        ask(&mut a, 0);
        assert!(!answered_by_1(&mut a, 7, Answer::Unsure, 10, 0));
        assert!(ask(&mut a, 10 + RETRY_MS - 1).is_empty());
        assert_eq!(ask(&mut a, 10 + RETRY_MS).len(), 1);
        assert!(!answered_by_1(&mut a, 7, Answer::Lives, 20, 0));
        assert!(a.is_empty());
        assert!(
            !answered_by_1(&mut a, 7, Answer::Gone, 30, 0),
            "an answer nobody asked for does nothing"
        );
    }

    #[test]
    fn a_gone_spread_is_reported_only_after_a_second_answer_past_the_grace() {
        let mut a = Audit::default();
        let h = holder_name(b"{p}views", 7, 1, 0);
        see(&mut a, &h, 0);
        ask(&mut a, 0);
        assert!(!answered_by_1(&mut a, 7, Answer::Gone, 100, 1_000));
        assert!(ask(&mut a, 1_099).is_empty(), "not before the grace");
        assert_eq!(ask(&mut a, 1_100).len(), 1);
        // A home restored within the grace: it lives, nothing is reported.
        assert!(!answered_by_1(&mut a, 7, Answer::Lives, 1_100, 1_000));
        see(&mut a, &h, 2_000);
        ask(&mut a, 2_000);
        answered_by_1(&mut a, 7, Answer::Gone, 2_000, 1_000);
        assert_eq!(a.orphan_count(), 0);
        ask(&mut a, 3_000);
        assert!(answered_by_1(&mut a, 7, Answer::Gone, 3_000, 1_000));
        assert_eq!(a.orphan_count(), 1);
        assert_eq!(a.len(), 1, "reported, never dropped: its holders stay");
        let (q, holders, since) = a.orphans().next().unwrap();
        assert_eq!((q, holders, since), (&question(7), &[h.clone()][..], 3_000));
        ask(&mut a, 20_000);
        assert!(
            !answered_by_1(&mut a, 7, Answer::Gone, 20_000, 1_000),
            "reported once"
        );
    }

    #[test]
    fn a_reported_spread_whose_home_comes_back_is_no_longer_reported() {
        let mut a = Audit::default();
        see(&mut a, &holder_name(b"{p}views", 7, 1, 0), 0);
        ask(&mut a, 0);
        assert!(answered_by_1(&mut a, 7, Answer::Gone, 5, 0));
        assert!(
            ask(&mut a, 5 + REPORTED_RECHECK_MS - 1).is_empty(),
            "asked again later"
        );
        assert_eq!(ask(&mut a, 5 + REPORTED_RECHECK_MS).len(), 1);
        // A reshard put back (`--cluster fix`): the home is found again.
        assert!(!answered_by_1(&mut a, 7, Answer::Lives, 20_000, 0));
        assert_eq!(a.orphan_count(), 0);
        assert!(a.take_orphans(7).is_empty());
    }

    #[test]
    fn only_an_operator_takes_the_holders_of_a_reported_spread() {
        let mut a = Audit::default();
        let h = holder_name(b"{p}views", 7, 1, 0);
        see(&mut a, &h, 0);
        see(&mut a, &holder_name(b"{p}views", 8, 1, 0), 0);
        assert!(a.take_orphans(7).is_empty(), "suspected, not reported");
        ask(&mut a, 0);
        assert!(answered_by_1(&mut a, 7, Answer::Gone, 5, 0));
        assert!(a.take_orphans(8).is_empty(), "another spread");
        let taken = a.take_orphans(7);
        assert_eq!(taken.len(), 1);
        assert_eq!((taken[0].spread_id, &taken[0].holders), (7, &vec![h]));
        assert_eq!(a.len(), 1, "spread 8 is still followed");
        assert!(a.take_orphans(7).is_empty(), "taken once");
    }

    #[test]
    fn an_answer_counts_only_from_the_master_asked_and_once() {
        let mut a = Audit::default();
        see(&mut a, &holder_name(b"{p}views", 7, 1, 0), 0);
        assert!(
            !answered_by_1(&mut a, 7, Answer::Gone, 1, 0),
            "followed, but not asked yet"
        );
        ask(&mut a, 0);
        // Another master (asked before a reshard or a failover, or a forger) says gone.
        assert!(!a.answered(&question(7), &2, Answer::Gone, 5, 0));
        assert_eq!(a.orphan_count(), 0);
        assert!(!answered_by_1(&mut a, 7, Answer::Unsure, 6, 0));
        assert!(
            !answered_by_1(&mut a, 7, Answer::Gone, 7, 0),
            "a second copy, or a late answer, of a question already answered"
        );
        assert_eq!(a.orphan_count(), 0);
        ask(&mut a, 6 + RETRY_MS);
        assert!(answered_by_1(&mut a, 7, Answer::Gone, 6 + RETRY_MS, 0));
    }

    #[test]
    fn without_a_grace_the_first_gone_reports() {
        let mut a = Audit::default();
        see(&mut a, &holder_name(b"{p}views", 7, 1, 0), 0);
        ask(&mut a, 0);
        assert!(answered_by_1(&mut a, 7, Answer::Gone, 5, 0));
    }

    #[test]
    fn at_most_the_asked_number_of_questions_go_at_once() {
        let mut a = Audit::default();
        for id in 1..=5 {
            see(&mut a, &holder_name(b"{p}views", id, 1, 0), 0);
        }
        assert_eq!(a.due(0, 2).len(), 2);
        assert_eq!(a.due(0, 10).len(), 3, "the rest, at the next call");
        assert!(a.due(0, 10).is_empty());
    }

    #[test]
    fn a_pass_forgets_spreads_it_did_not_see_again() {
        let mut a = Audit::default();
        see(&mut a, &holder_name(b"{p}views", 7, 1, 0), 0);
        a.end_pass();
        assert_eq!(a.len(), 1, "seen in the pass that ended");
        see(&mut a, &holder_name(b"{p}views", 8, 1, 0), 0);
        a.end_pass();
        assert_eq!(a.len(), 1);
        assert_eq!(ask(&mut a, 0), vec![question(8)]);
        a.end_pass();
        assert!(a.is_empty() && a.bytes == 0);
    }

    #[test]
    fn a_folded_holder_is_asked_about_the_home_it_was_sealed_into() {
        let h = holder_name(b"{p}views", 7, 1, 0);
        let mut sealed = Counter::plain(0);
        let holder = crate::counter::transfer::Giver {
            name: &h,
            new_id: 9,
        };
        sealed.seal_into(b"{p}views", 5, 0, holder).unwrap();
        // Renamed by a user: its name carries another home, its fold still goes to its own.
        let renamed = b"{ctr.0000000000000007.1.0}elsewhere";
        assert_eq!(question_for(renamed, Some(&sealed)), Some(question(7)));
        assert_eq!(
            question_for(renamed, None).map(|q| q.home),
            Some(b"elsewhere".to_vec())
        );
        // A budget move in flight changes nothing.
        let mut giving = Counter::plain(10);
        let other = holder_name(b"{p}views", 7, 2, 0);
        let from = crate::counter::transfer::Giver {
            name: &h,
            new_id: 3,
        };
        giving
            .start_transfer(&other, crate::counter::transfer::Units::floor(-4), 0, from)
            .unwrap();
        assert_eq!(question_for(&h, Some(&giving)), Some(question(7)));
        assert_eq!(question_for(b"{p}views", None), None, "a home");
    }

    #[test]
    fn the_home_side_says_gone_only_when_it_read_every_key_of_a_slot_it_serves() {
        assert_eq!(answer(true, Some(false)), Answer::Gone);
        assert_eq!(answer(true, Some(true)), Answer::Lives);
        assert_eq!(answer(true, None), Answer::Unsure);
        assert_eq!(answer(false, Some(false)), Answer::Unsure);
        for a in [Answer::Lives, Answer::Gone, Answer::Unsure] {
            assert_eq!(Answer::from_code(a.code()), Some(a));
        }
        assert_eq!(Answer::from_code(3), None);
    }

    #[test]
    fn the_bounds_hold() {
        let mut a = Audit::default();
        for id in 1..=MAX_SUSPECTS as u64 + 5 {
            see(&mut a, &holder_name(b"{p}views", id, 1, 0), 0);
        }
        assert_eq!(a.len(), MAX_SUSPECTS);
        assert!(a.bytes <= MAX_SUSPECT_BYTES);
    }
}
