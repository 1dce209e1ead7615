//! The orphan audit's node: one master's part of the audit (`counter::audit` holds the rules:
//! which spreads are followed, when one is reported). Its owner walks the master's keys and
//! hands it each holder it found ([`AuditNode::saw`]) and each pass's end; the node asks the
//! master serving each spread's home slot whether the spread lives there (itself directly),
//! answers such questions as that master (a `Gone` only once its replicas hold what it read),
//! reports a spread gone for good, and deletes its holders here on the operator's order only.

use super::host::{Event, Host, NodeMessage, Route};
use super::replicas::{take_open, Gate};
use crate::counter::audit::{self, Answer, Audit, Question};

/// Questions a master asks (or answers itself) per tick at most.
pub const QUESTIONS_PER_TICK: usize = 512;
/// Answers held for the replicas, at most (past it a question goes unanswered: asked again).
const MAX_HELD: usize = 1024;

/// Whom a question was asked of (None: this master) and under which request id: only the
/// answer of that master to that request ends it (`Audit::answered`).
pub type Asked<P> = (Option<P>, u64);

/// Answers that wait for this master's replicas.
struct Held<P> {
    to: P,
    /// The ask's request id (None: an earlier module's).
    request: Option<u64>,
    answers: Vec<(Question, Answer)>,
    gate: Gate,
}

/// One master's audit: soft state of its process (a restart or a failover walks anew).
pub struct AuditNode<P> {
    audit: Audit<Asked<P>>,
    /// The next request id (from the start the owner draws: an answer to an earlier life of
    /// the node matches nothing).
    next_request: u64,
    held: Vec<Held<P>>,
}

/// A node whose request ids start at 0 (the owner draws a random start: [`AuditNode::new`]).
impl<P> Default for AuditNode<P> {
    fn default() -> Self {
        AuditNode {
            audit: Audit::default(),
            next_request: 0,
            held: Vec::new(),
        }
    }
}

impl<P: Clone + PartialEq> AuditNode<P> {
    pub fn new(first_request: u64) -> AuditNode<P> {
        AuditNode {
            audit: Audit::default(),
            next_request: first_request,
            held: Vec::new(),
        }
    }

    /// What the audit follows (the reported spreads: `CTR.ORPHANS`).
    pub fn audit(&self) -> &Audit<Asked<P>> {
        &self.audit
    }

    /// The walk found the holder `name`, to ask about with `q`.
    pub fn saw(&mut self, q: Question, name: &[u8], now: i64) {
        self.audit.saw(q, name, now);
    }

    /// The walk ended a pass.
    pub fn end_pass<H: Host<Peer = P>>(&mut self, host: &mut H) {
        self.audit.end_pass();
        host.count(Event::AuditPass);
        host.count(Event::OrphansReported(self.audit.orphan_count() as u64));
    }

    /// A replica (or a node loading) follows nothing; promoted, it walks anew.
    pub fn stop<H: Host<Peer = P>>(&mut self, host: &mut H) {
        self.audit.clear();
        self.held.clear();
        host.count(Event::OrphansReported(0));
    }

    /// Sends the held answers whose reads this master's replicas hold.
    pub fn send_held<H: Host<Peer = P>>(&mut self, host: &mut H) {
        if self.held.is_empty() {
            return;
        }
        let Some(r) = host.replication() else {
            return;
        };
        for held in take_open(&mut self.held, &r, |h| &mut h.gate) {
            let m = NodeMessage::AuditAnswers {
                request: held.request,
                answers: held.answers,
            };
            host.send(&held.to, m);
        }
    }

    /// Asks what is due: this master answers its own homes' questions, the others get one
    /// request each.
    pub fn ask<H: Host<Peer = P>>(&mut self, host: &mut H) {
        let now = host.now_ms();
        let due = self.audit.due(now, QUESTIONS_PER_TICK);
        if due.is_empty() {
            return;
        }
        host.count(Event::AuditQuestions(due.len() as u64));
        let mut remote: Vec<(P, Vec<Question>)> = Vec::new();
        for q in due {
            match host.route(&q.home) {
                // The home's master is this one: its deletions and ours share one
                // replication stream, in order, so nothing waits for the replicas.
                Route::Here => {
                    let asked = (None, self.request());
                    self.audit.asked(&q, asked.clone());
                    let a = home_side(host, &q);
                    self.on_answer(host, asked, &q, a);
                }
                Route::To(node) => match remote.iter_mut().find(|(n, _)| *n == node) {
                    Some((_, questions)) => questions.push(q),
                    None => remote.push((node, vec![q])),
                },
                // No master known for the slot now: asked again after the answer's timeout.
                Route::Unknown => {}
            }
        }
        for (node, questions) in remote {
            let request = self.request();
            for q in &questions {
                self.audit.asked(q, (Some(node.clone()), request));
            }
            let request = Some(request);
            host.send(&node, NodeMessage::AuditAsk { request, questions });
        }
    }

    fn request(&mut self) -> u64 {
        let id = self.next_request;
        self.next_request = id.wrapping_add(1);
        id
    }

    /// A message from node `from`: a question this master answers as the home side, or the
    /// answers to one of its own requests.
    pub fn receive<H: Host<Peer = P>>(&mut self, host: &mut H, from: P, m: NodeMessage) {
        match m {
            NodeMessage::AuditAsk { request, questions } => {
                host.select_db(0);
                let answers: Vec<(Question, Answer)> = (questions.into_iter())
                    .map(|q| {
                        let a = home_side(host, &q);
                        (q, a)
                    })
                    .collect();
                if !audit::answers_wait_for_replicas(&answers) {
                    host.send(&from, NodeMessage::AuditAnswers { request, answers });
                } else if self.held.len() < MAX_HELD {
                    let gate = Gate::default();
                    self.held.push(Held {
                        to: from,
                        request,
                        answers,
                        gate,
                    });
                }
            }
            // An earlier module's answers carry no request id: nothing to match them with.
            NodeMessage::AuditAnswers {
                request: Some(request),
                answers,
            } => {
                for (q, a) in answers {
                    self.on_answer(host, (Some(from.clone()), request), &q, a);
                }
            }
            _ => {}
        }
    }

    /// An answer of a master (None: this one) to one of this master's requests, counted only
    /// as the answer to the question last asked of it under that request: a spread gone for
    /// good is reported, and its holders here stay (absence is no proof that a spread ended;
    /// `CTR.ORPHANS DELETE` is the operator's).
    fn on_answer<H: Host<Peer = P>>(
        &mut self,
        host: &mut H,
        from: Asked<P>,
        q: &Question,
        a: Answer,
    ) {
        let (now, grace) = (host.now_ms(), host.orphan_grace_ms());
        let reported = self.audit.answered(q, &from, a, now, grace);
        host.count(Event::OrphansReported(self.audit.orphan_count() as u64));
        if reported {
            host.count(Event::OrphanReported);
            host.warn(&format!(
                "ctr: the audit reports spread {:016x} as an orphan: its home is not found on \
                 the master of its slot; its holders here are kept (CTR.ORPHANS lists them, \
                 CTR.ORPHANS DELETE {:016x} deletes them)",
                q.spread_id, q.spread_id
            ));
        }
    }

    /// The operator's order (`CTR.ORPHANS DELETE id`): deletes this master's holders of the
    /// reported spread `id`, each read again (still a holder of exactly that spread id and
    /// carried home, in a slot this master serves). How many keys went; None when `id` is not
    /// reported here (nothing deleted).
    pub fn delete_orphans<H: Host<Peer = P>>(&mut self, host: &mut H, id: u64) -> Option<u64> {
        let taken = self.audit.take_orphans(id);
        if taken.is_empty() {
            return None;
        }
        host.count(Event::OrphansReported(self.audit.orphan_count() as u64));
        host.select_db(0);
        let mut deleted = 0;
        for c in &taken {
            let q = Question {
                spread_id: c.spread_id,
                home: c.home.clone(),
            };
            for name in &c.holders {
                if still_asked_with(host, name, &q) && host.delete(name) {
                    deleted += 1;
                }
            }
        }
        host.count(Event::OrphanHoldersDeleted(deleted));
        host.warn(&format!(
            "ctr: CTR.ORPHANS DELETE {id:016x} deleted {deleted} holder(s) of that spread"
        ));
        Some(deleted)
    }
}

/// The home side's answer, on this master (database 0): lives when a counter of the home
/// name's slot is a home of the spread (the carried name, or the name this node saw that home
/// renamed to, first: no slot to read); gone only when this node serves the slot and read all
/// of its keys.
fn home_side<H: Host>(host: &mut H, q: &Question) -> Answer {
    if !host.serves(&q.home) {
        return Answer::Unsure;
    }
    if host.living_home(&q.home, q.spread_id).is_some() {
        return Answer::Lives;
    }
    let found = host.slot_holds_home(&q.home, q.spread_id);
    audit::answer(true, found)
}

/// True when `name` is still a holder this master serves that the walk would ask about with
/// `q` (read again: it may have changed since the walk; a stray is no holder).
fn still_asked_with<H: Host>(host: &H, name: &[u8], q: &Question) -> bool {
    host.serves(name)
        && host
            .read(name, |c| audit::question_for(name, c).as_ref() == Some(q))
            .unwrap_or(false)
}
