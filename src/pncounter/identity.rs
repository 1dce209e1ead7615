//! Which replica id this deployment writes to, and how that id survives restarts and changes on
//! failover, without any module-global RDB data (see docs/PNC.md, "Replica id lifecycle").
//!
//! - The id in use is a [`Home`]: an id plus a generation. Every local write (PNC.ADD,
//!   PNC.CLEAR) stamps the key it changes with the home, and the stamp is saved with the key
//!   (RDB, AOF rewrite) and replicated (inside `PNC.APPLY`).
//! - Loading a dataset (startup, `DEBUG RELOAD`, replica sync, AOF replay) [`observe`]s every
//!   stamp; the stamp with the highest generation whose id belongs to this deployment (the
//!   configured id or one of its failover successors; any id when none is configured) becomes
//!   the id in use. So the id, including a random one, survives restarts.
//! - Without a configured id and without any stamp, the first local write makes a random id
//!   (`r-<16 hex>`).
//! - Becoming a primary (failover) moves to a fresh id with a higher generation: a successor of
//!   the configured id, or a new random id. Becoming a replica forgets the id in use: a replica
//!   has no slot of its own and follows its master's stamps.
//! - Changing `ctr.replica-id` at run time moves to the new id (a fresh random one when set to
//!   the empty string), also with a higher generation.
//!
//! [`observe`]: Identity::observe

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::ReplicaId;

/// An id in use by a deployment and its generation: later ids have higher generations.
#[derive(Debug, Clone, Eq)]
pub struct Home {
    pub id: ReplicaId,
    pub gen: u64,
}

/// The generation first: it is the cheap comparison, and it tells most different homes apart.
impl PartialEq for Home {
    fn eq(&self, other: &Self) -> bool {
        self.gen == other.gen && self.id == other.id
    }
}

#[derive(Debug, Default)]
pub struct Identity {
    /// `ctr.replica-id`; None = automatic.
    configured: Option<ReplicaId>,
    /// The id local writes go to; None until adopted from the data or first needed.
    current: Option<Home>,
    /// The highest generation seen, from any source.
    max_gen: u64,
    /// Configs have been applied at load: later config changes are operator changes.
    started: bool,
}

static IDENTITY: Mutex<Identity> = Mutex::new(Identity::new());

/// The deployment's identity (module-global; only the main thread uses it).
pub fn identity() -> MutexGuard<'static, Identity> {
    IDENTITY.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Identity {
    pub const fn new() -> Self {
        Identity {
            configured: None,
            current: None,
            max_gen: 0,
            started: false,
        }
    }

    pub fn configured(&self) -> Option<&ReplicaId> {
        self.configured.as_ref()
    }

    pub fn current(&self) -> Option<&Home> {
        self.current.as_ref()
    }

    /// Applies `ctr.replica-id`. While the module loads this only records it; afterwards a
    /// different value moves the deployment to that id (or to a fresh random one for `None`).
    /// Returns true when the id in use changed.
    pub fn configure(&mut self, id: Option<ReplicaId>, random: [u8; 8]) -> bool {
        if !self.started {
            self.configured = id;
            return false;
        }
        if id == self.configured {
            return false;
        }
        self.configured = id.clone();
        self.move_to(id.unwrap_or_else(|| ReplicaId::random(random)));
        true
    }

    /// Marks the end of module load: config changes from now on are run-time changes.
    pub fn finish_startup(&mut self) {
        self.started = true;
    }

    /// True when `id` may be this deployment's: any id when none is configured, else the
    /// configured one or one of its failover successors.
    pub fn is_own_lineage(&self, id: &ReplicaId) -> bool {
        self.configured
            .as_ref()
            .is_none_or(|base| id.descends_from(base))
    }

    /// A stamp found in loaded or replicated data. Adopted when it is of this deployment's
    /// lineage and newer than the id in use.
    pub fn observe(&mut self, home: &Home) {
        self.max_gen = self.max_gen.max(home.gen);
        let newer = self.current.as_ref().is_none_or(|c| home.gen > c.gen);
        if newer && self.is_own_lineage(&home.id) {
            self.current = Some(home.clone());
        }
    }

    /// The home a local write stamps: the id in use, made on first need (the configured id, or
    /// a random one) when there is none.
    pub fn local_home(&mut self, random: impl FnOnce() -> [u8; 8]) -> &Home {
        let home = match self.current.take() {
            Some(home) => home,
            None => {
                let id = match &self.configured {
                    Some(id) => id.clone(),
                    None => ReplicaId::random(random()),
                };
                self.next_home(id)
            }
        };
        self.current.insert(home)
    }

    /// This deployment became a primary: its previous id's latest state may be lost with the
    /// old master, so it moves to a fresh id.
    pub fn promote(&mut self, random: [u8; 8]) -> Home {
        let id = match &self.configured {
            Some(base) => ReplicaId::successor(base, random),
            None => ReplicaId::random(random),
        };
        self.move_to(id)
    }

    /// This deployment became a replica: it has no slot of its own until promoted.
    pub fn demote(&mut self) {
        self.current = None;
    }

    fn move_to(&mut self, id: ReplicaId) -> Home {
        let home = self.next_home(id);
        self.current = Some(home.clone());
        home
    }

    /// `id` with a generation above every one seen.
    fn next_home(&mut self, id: ReplicaId) -> Home {
        let gen = self.max_gen.saturating_add(1);
        self.max_gen = gen;
        Home { id, gen }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ReplicaId {
        ReplicaId::parse(s.as_bytes()).unwrap()
    }

    fn started(configured: Option<&str>) -> Identity {
        let mut i = Identity::new();
        i.configure(configured.map(id), [0; 8]);
        i.finish_startup();
        i
    }

    #[test]
    fn configured_id_is_used_from_the_first_write() {
        let mut i = started(Some("a"));
        assert_eq!(i.current(), None);
        let home = i
            .local_home(|| unreachable!("no randomness needed"))
            .clone();
        assert_eq!(
            home,
            Home {
                id: id("a"),
                gen: 1
            }
        );
        assert_eq!(i.local_home(|| [9; 8]), &home, "stable");
    }

    #[test]
    fn random_id_is_made_once() {
        let mut i = started(None);
        let home = i.local_home(|| [1; 8]).clone();
        assert_eq!(home.id.as_str(), "r-0101010101010101");
        assert_eq!(i.local_home(|| [2; 8]), &home);
    }

    #[test]
    fn a_restart_adopts_the_newest_stamp_of_its_lineage() {
        // Unconfigured: any lineage, highest generation wins whatever the load order.
        let mut i = started(None);
        i.observe(&Home {
            id: id("r-2"),
            gen: 2,
        });
        i.observe(&Home {
            id: id("r-1"),
            gen: 1,
        });
        assert_eq!(i.current().unwrap().id, id("r-2"));
        assert_eq!(i.local_home(|| [0; 8]).gen, 2);

        // Configured: successors of the configured id count, other ids do not.
        let mut i = started(Some("a"));
        i.observe(&Home {
            id: id("a"),
            gen: 1,
        });
        i.observe(&Home {
            id: id("b"),
            gen: 7,
        });
        i.observe(&Home {
            id: id("a.0123456789ab"),
            gen: 3,
        });
        assert_eq!(i.current().unwrap().id, id("a.0123456789ab"));
        // An operator who renamed the deployment gets the new name, newer than anything seen.
        let mut i = started(Some("c"));
        i.observe(&Home {
            id: id("a"),
            gen: 4,
        });
        assert_eq!(i.current(), None);
        assert_eq!(
            i.local_home(|| [0; 8]),
            &Home {
                id: id("c"),
                gen: 5
            }
        );
    }

    #[test]
    fn promotion_moves_to_a_fresh_newer_id() {
        let mut i = started(Some("a"));
        i.observe(&Home {
            id: id("a"),
            gen: 1,
        });
        let next = i.promote([0xab; 8]);
        assert_eq!(next.id.as_str(), "a.abababababab");
        assert_eq!(next.gen, 2);
        // After a restart the newer stamp wins over the old id's stamps.
        let mut restarted = started(Some("a"));
        restarted.observe(&next);
        restarted.observe(&Home {
            id: id("a"),
            gen: 1,
        });
        assert_eq!(restarted.current(), Some(&next));

        let mut i = started(None);
        let first = i.local_home(|| [1; 8]).clone();
        let second = i.promote([2; 8]);
        assert_ne!(first.id, second.id);
        assert!(second.gen > first.gen);
    }

    #[test]
    fn a_replica_follows_its_master_and_forgets_on_demotion() {
        let mut i = started(None);
        i.local_home(|| [1; 8]);
        i.demote();
        assert_eq!(i.current(), None);
        i.observe(&Home {
            id: id("m"),
            gen: 1,
        });
        assert_eq!(i.current().unwrap().id, id("m"));
        // The generation keeps growing across the whole history.
        assert_eq!(i.promote([3; 8]).gen, 2);
    }

    #[test]
    fn run_time_config_changes_move_the_id() {
        let mut i = started(Some("a"));
        let a = i.local_home(|| [0; 8]).clone();
        assert!(!i.configure(Some(id("a")), [0; 8]), "same value: no change");
        assert!(i.configure(Some(id("b")), [0; 8]));
        let b = i.local_home(|| [0; 8]).clone();
        assert_eq!(b.id, id("b"));
        assert!(b.gen > a.gen);
        assert!(i.configure(None, [5; 8]));
        let r = i.local_home(|| [0; 8]);
        assert_eq!(r.id.as_str(), "r-0505050505050505");
        assert!(r.gen > b.gen);
    }

    #[test]
    fn configuring_during_load_records_only() {
        let mut i = Identity::new();
        assert!(!i.configure(Some(id("a")), [0; 8]));
        assert!(!i.configure(Some(id("b")), [0; 8]));
        assert_eq!(i.configured(), Some(&id("b")));
        assert_eq!(i.current(), None);
    }
}
