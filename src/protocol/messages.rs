//! The one table of the spread node's cluster-bus message kinds: each kind's byte on the wire,
//! the machine that receives it, and whether receiving it may write. The bytes never change
//! (a cluster runs mixed versions while it is upgraded); the payloads are versioned in
//! `crate::persist::*_msg`, and `persist::wire_bytes`' golden-bytes tests pin each kind's
//! encoding.

/// A cluster node's id (40 bytes), as the bus names a sender and a target.
pub type NodeId = [u8; 40];

/// A kind of bus message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// A gather asks a master for holders' values (`persist::gather_msg`).
    GatherRequest,
    GatherResponse,
    /// A folded holder's seal, a giver's credit and the receiver's answer
    /// (`persist::transfer_msg`).
    Seal,
    Credit,
    Ack,
    /// A gone home's holders to collect, and the answer (`persist::collect_msg`).
    Collect,
    Collected,
    /// The orphan audit asks whether spreads live, and the answer (`persist::audit_msg`).
    AuditAsk,
    AuditAnswer,
    /// Budget following demand (`persist::demand_msg`): a holder's master notices refusals, the
    /// home's master polls, the holders' masters answer, the home's master has a giver give,
    /// and tells the whole headroom it saw.
    DemandNotice,
    DemandPoll,
    DemandAnswer,
    DemandGive,
    Headroom,
    /// A first write of a holder asks the home's master whether it is listed, and the answer
    /// (`persist::holder_check_msg`).
    HolderCheckRequest,
    HolderCheckResponse,
    /// A grow asks the master of a planned holder name whether the name is free there, and the
    /// answer (`persist::admission_msg`).
    AdmissionRequest,
    AdmissionResponse,
}

/// The machine that receives a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    Gather,
    Transfer,
    Collect,
    Audit,
    BudgetMoves,
    HolderCheck,
    HolderAdmission,
}

impl MessageKind {
    /// Every kind, in byte order.
    pub const ALL: [MessageKind; 18] = [
        MessageKind::GatherRequest,
        MessageKind::GatherResponse,
        MessageKind::Seal,
        MessageKind::Credit,
        MessageKind::Ack,
        MessageKind::Collect,
        MessageKind::Collected,
        MessageKind::AuditAsk,
        MessageKind::AuditAnswer,
        MessageKind::DemandNotice,
        MessageKind::DemandPoll,
        MessageKind::DemandAnswer,
        MessageKind::DemandGive,
        MessageKind::Headroom,
        MessageKind::HolderCheckRequest,
        MessageKind::HolderCheckResponse,
        MessageKind::AdmissionRequest,
        MessageKind::AdmissionResponse,
    ];

    /// The kind's byte on the wire (0xC7 to 0xD8, in the order above).
    pub fn byte(self) -> u8 {
        match self {
            MessageKind::GatherRequest => 0xC7,
            MessageKind::GatherResponse => 0xC8,
            MessageKind::Seal => 0xC9,
            MessageKind::Credit => 0xCA,
            MessageKind::Ack => 0xCB,
            MessageKind::Collect => 0xCC,
            MessageKind::Collected => 0xCD,
            MessageKind::AuditAsk => 0xCE,
            MessageKind::AuditAnswer => 0xCF,
            MessageKind::DemandNotice => 0xD0,
            MessageKind::DemandPoll => 0xD1,
            MessageKind::DemandAnswer => 0xD2,
            MessageKind::DemandGive => 0xD3,
            MessageKind::Headroom => 0xD4,
            MessageKind::HolderCheckRequest => 0xD5,
            MessageKind::HolderCheckResponse => 0xD6,
            MessageKind::AdmissionRequest => 0xD7,
            MessageKind::AdmissionResponse => 0xD8,
        }
    }

    /// The kind of a byte received (None: not one of this module's).
    pub fn from_byte(byte: u8) -> Option<MessageKind> {
        MessageKind::ALL.into_iter().find(|k| k.byte() == byte)
    }

    /// The machine that receives it.
    pub fn receiver(self) -> Receiver {
        use MessageKind::*;
        match self {
            GatherRequest | GatherResponse => Receiver::Gather,
            Seal | Credit | Ack => Receiver::Transfer,
            Collect | Collected => Receiver::Collect,
            AuditAsk | AuditAnswer => Receiver::Audit,
            DemandNotice | DemandPoll | DemandAnswer | DemandGive | Headroom => {
                Receiver::BudgetMoves
            }
            HolderCheckRequest | HolderCheckResponse => Receiver::HolderCheck,
            AdmissionRequest | AdmissionResponse => Receiver::HolderAdmission,
        }
    }
}

impl Receiver {
    /// True when receiving may write (and so replicate): the runtime drops such messages while
    /// the server pauses writes (their senders resend). The gather, the holder check and the
    /// holder admission only read; what a gather's clear or a listed write then runs checks the pause itself.
    pub fn writes(self) -> bool {
        !matches!(
            self,
            Receiver::Gather | Receiver::HolderCheck | Receiver::HolderAdmission
        )
    }

    /// Its name in the panic log and `ctr.debug-panic-in`.
    pub fn callback(self) -> &'static str {
        match self {
            Receiver::Gather => "bus-gather",
            Receiver::Transfer => "bus-transfer",
            Receiver::Collect => "bus-collect",
            Receiver::Audit => "bus-audit",
            Receiver::BudgetMoves => "bus-floor-moves",
            Receiver::HolderCheck => "bus-holder-check",
            Receiver::HolderAdmission => "bus-holder-admission",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_own_byte_and_reads_back() {
        let bytes: Vec<u8> = MessageKind::ALL.iter().map(|k| k.byte()).collect();
        assert_eq!(
            bytes,
            (0xC7..=0xD8).collect::<Vec<u8>>(),
            "the wire bytes never change"
        );
        for kind in MessageKind::ALL {
            assert_eq!(MessageKind::from_byte(kind.byte()), Some(kind));
        }
        assert_eq!(MessageKind::from_byte(0xC6), None);
        assert_eq!(MessageKind::from_byte(0xD9), None);
    }

    #[test]
    fn only_the_readers_receive_while_writes_are_paused() {
        let readers: Vec<MessageKind> = MessageKind::ALL
            .into_iter()
            .filter(|k| !k.receiver().writes())
            .collect();
        use MessageKind::*;
        assert_eq!(
            readers,
            [
                GatherRequest,
                GatherResponse,
                HolderCheckRequest,
                HolderCheckResponse,
                AdmissionRequest,
                AdmissionResponse
            ]
        );
    }
}
