//! Golden bytes of every cluster-bus message kind (no server): a fixed message of each kind of
//! the table (`protocol::messages`) encodes to exactly these bytes and decodes back. A cluster
//! runs mixed module versions while it is upgraded, so a change here is a wire change: it
//! needs a new payload version that older nodes refuse as malformed, never new meanings of old
//! bytes. The payloads added beside a kind's since (a version 3 credit, the ceiled kinds of
//! the replicated `CTR.STEP`, which replicas of mixed versions read too, a gather response
//! with ceiled answers) are pinned the same way in [`LATER_GOLDEN`].

use crate::counter::audit::{Answer, Question};
use crate::counter::collect::Collection;
use crate::counter::rebalance::DemandMeter;
use crate::counter::step::Step;
use crate::counter::transfer::Units;
use crate::persist::admission_msg::{self, NameAnswer};
use crate::persist::demand_msg::{Give, Headroom, HolderDemand};
use crate::persist::gather_msg::HolderAnswer;
use crate::persist::holder_check_msg::Verdict;
use crate::persist::transfer_msg;
use crate::persist::transfer_msg::{Ack, Credit, Seal};
use crate::persist::{audit_msg, collect_msg, demand_msg, gather_msg, holder_check_msg, step_msg};
use crate::protocol::messages::MessageKind;
use crate::protocol::messages::MessageKind as K;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const HOME: &[u8] = b"{ctr}home";
const HOLDER: &[u8] = b"{ctr.00000000000000ab.1.0}{ctr}home";

/// The fixed credit, with `dc` ceiling units.
fn credit(dc: i64) -> Credit {
    Credit {
        giver: HOLDER.to_vec(),
        from: HOLDER.to_vec(),
        receiver: HOME.to_vec(),
        giver_id: 0x0304,
        seq: 9,
        dv: -5,
        df: 4,
        dc,
        fold_id: 0x0102,
    }
}

/// Each kind's encoding of its fixed message, in the table's order.
fn encodings() -> Vec<(MessageKind, Vec<u8>)> {
    let question = Question {
        spread_id: 0xab,
        home: HOME.to_vec(),
    };
    let meter = DemandMeter {
        refused_units: 7,
        refusals: 2,
        largest_refused: 5,
        ..DemandMeter::default()
    };
    vec![
        (
            K::GatherRequest,
            gather_msg::encode_request(0x1122, [HOLDER].into_iter()),
        ),
        (
            K::GatherResponse,
            gather_msg::encode_response(
                0x1122,
                &[
                    HolderAnswer::Value(-3),
                    HolderAnswer::Floored(10, 2),
                    HolderAnswer::NotHere,
                    HolderAnswer::Failed("WRONGTYPE".into()),
                ],
            ),
        ),
        (
            K::Seal,
            transfer_msg::encode_seal(&Seal {
                home: HOME.to_vec(),
                holder: HOLDER.to_vec(),
                fold_id: 0x0102,
            }),
        ),
        (K::Credit, transfer_msg::encode_credit(&credit(0))),
        (
            K::Ack,
            transfer_msg::encode_ack(&Ack {
                giver: HOLDER.to_vec(),
                receiver: HOME.to_vec(),
                seq: 9,
                refused: true,
            }),
        ),
        (
            K::Collect,
            collect_msg::encode(&[Collection {
                spread_id: 0xab,
                home: HOME.to_vec(),
                holders: vec![HOLDER.to_vec()],
            }]),
        ),
        (
            K::Collected,
            collect_msg::encode(&[Collection {
                spread_id: 0xab,
                home: HOME.to_vec(),
                holders: vec![HOLDER.to_vec(), HOME.to_vec()],
            }]),
        ),
        (
            K::AuditAsk,
            audit_msg::encode_ask(0x1122, std::slice::from_ref(&question)),
        ),
        (
            K::AuditAnswer,
            audit_msg::encode_answers(Some(0x1122), &[(question, Answer::Gone)]),
        ),
        (K::DemandNotice, demand_msg::encode_notice(HOME)),
        (
            K::DemandPoll,
            demand_msg::encode_poll(0x55, HOME, &[HOLDER.to_vec()]),
        ),
        (
            K::DemandAnswer,
            demand_msg::encode_answer(
                0x55,
                &[
                    HolderDemand::Here {
                        budget: 40,
                        moving_out: 3,
                        meter,
                    },
                    HolderDemand::NotHere,
                ],
            ),
        ),
        (
            K::DemandGive,
            demand_msg::encode_give(&Give {
                giver: HOLDER.to_vec(),
                receiver: HOME.to_vec(),
                units: 12,
            }),
        ),
        (
            K::Headroom,
            demand_msg::encode_headroom(&Headroom {
                home: HOME.to_vec(),
                spread_id: 0xab,
                units: 300,
                round_ms: 1_700_000_000_000,
            }),
        ),
        (
            K::HolderCheckRequest,
            holder_check_msg::encode_request(0x77, HOLDER),
        ),
        (
            K::HolderCheckResponse,
            holder_check_msg::encode_response(0x77, Verdict::NotListed),
        ),
        (
            K::AdmissionRequest,
            admission_msg::encode_request(0x78, HOLDER),
        ),
        (
            K::AdmissionResponse,
            admission_msg::encode_response(0x78, NameAnswer::Taken),
        ),
    ]
}

const GOLDEN: [(u8, &str); 18] = [
    (0xC7, "01221100000000000001237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65"),
    (0xC8, "01221100000000000004000503140401020957524f4e4754595045"),
    (0xC9, "02097b6374727d686f6d65237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d650201000000000000"),
    (0xCA, "02237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65097b6374727d686f6d6504030000000000000909080201000000000000"),
    (0xCB, "02237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65097b6374727d686f6d650901"),
    (0xCC, "0101ab00000000000000097b6374727d686f6d6501237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65"),
    (0xCD, "0101ab00000000000000097b6374727d686f6d6502237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65097b6374727d686f6d65"),
    (0xCE, "02221100000000000001ab00000000000000097b6374727d686f6d65"),
    (0xCF, "02221100000000000001ab00000000000000097b6374727d686f6d6501"),
    (0xD0, "01097b6374727d686f6d65"),
    (0xD1, "015500000000000000097b6374727d686f6d6501237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65"),
    (0xD2, "0155000000000000000202500307020501"),
    (0xD3, "01237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65097b6374727d686f6d650c"),
    (0xD4, "01097b6374727d686f6d65ab00000000000000ac0280a0abfef962"),
    (0xD5, "017700000000000000237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65"),
    (0xD6, "01770000000000000001"),
    (0xD7, "017800000000000000237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65"),
    (0xD8, "01780000000000000001"),
];

#[test]
fn every_kind_encodes_to_its_golden_bytes() {
    let encodings = encodings();
    assert_eq!(
        encodings.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        MessageKind::ALL,
        "one fixed message per kind of the table"
    );
    let mut wrong = Vec::new();
    for ((kind, bytes), (byte, golden)) in encodings.iter().zip(GOLDEN) {
        assert_eq!(kind.byte(), byte, "{kind:?}'s byte on the wire");
        if hex(bytes) != golden {
            wrong.push(format!("    (0x{byte:02X}, \"{}\"),", hex(bytes)));
        }
    }
    assert!(wrong.is_empty(), "bytes changed:\n{}", wrong.join("\n"));
}

#[test]
fn every_kind_decodes_its_golden_bytes_back() {
    let e = encodings();
    let bytes = |k: MessageKind| &e.iter().find(|(kind, _)| *kind == k).unwrap().1;
    let (id, names) = gather_msg::decode_request(bytes(K::GatherRequest)).unwrap();
    assert_eq!((id, names), (0x1122, vec![HOLDER]));
    let (id, answers) = gather_msg::decode_response(bytes(K::GatherResponse)).unwrap();
    assert_eq!(id, 0x1122);
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[1], HolderAnswer::Floored(10, 2));
    assert_eq!(
        transfer_msg::decode_seal(bytes(K::Seal)).unwrap().fold_id,
        0x0102
    );
    let credit = transfer_msg::decode_credit(bytes(K::Credit)).unwrap();
    assert_eq!(
        (credit.seq, credit.dv, credit.df, credit.giver_id),
        (9, -5, 4, 0x0304)
    );
    assert!(transfer_msg::decode_ack(bytes(K::Ack)).unwrap().refused);
    assert_eq!(
        collect_msg::decode(bytes(K::Collect)).unwrap()[0].holders,
        vec![HOLDER.to_vec()]
    );
    assert_eq!(
        collect_msg::decode(bytes(K::Collected)).unwrap()[0]
            .holders
            .len(),
        2
    );
    assert_eq!(
        audit_msg::decode_ask(bytes(K::AuditAsk)).unwrap().1[0].spread_id,
        0xab
    );
    assert_eq!(
        audit_msg::decode_answers(bytes(K::AuditAnswer)).unwrap().1[0].1,
        Answer::Gone
    );
    assert_eq!(
        demand_msg::decode_notice(bytes(K::DemandNotice)).unwrap(),
        HOME
    );
    let poll = demand_msg::decode_poll(bytes(K::DemandPoll)).unwrap();
    assert_eq!((poll.id, poll.names.len()), (0x55, 1));
    let (id, reports) = demand_msg::decode_answer(bytes(K::DemandAnswer)).unwrap();
    assert_eq!(
        (id, reports.len(), reports[1] == HolderDemand::NotHere),
        (0x55, 2, true)
    );
    assert_eq!(
        demand_msg::decode_give(bytes(K::DemandGive)).unwrap().units,
        12
    );
    assert_eq!(
        demand_msg::decode_headroom(bytes(K::Headroom))
            .unwrap()
            .units,
        300
    );
    let (id, holder) = holder_check_msg::decode_request(bytes(K::HolderCheckRequest)).unwrap();
    assert_eq!((id, holder), (0x77, HOLDER));
    let (id, verdict) = holder_check_msg::decode_response(bytes(K::HolderCheckResponse)).unwrap();
    assert_eq!((id, verdict), (0x77, Verdict::NotListed));
    let (id, name) = admission_msg::decode_request(bytes(K::AdmissionRequest)).unwrap();
    assert_eq!((id, name), (0x78, HOLDER));
    let (id, answer) = admission_msg::decode_response(bytes(K::AdmissionResponse)).unwrap();
    assert_eq!((id, answer), (0x78, NameAnswer::Taken));
}

/// A payload of [`LATER_GOLDEN`]: a bus credit, a `CTR.STEP` step and the key it is for, or a
/// gather response (request id 0x1122).
enum Later {
    Credit(Credit),
    Step(&'static [u8], Step),
    Gathered(Vec<HolderAnswer>),
}

impl Later {
    fn encode(&self) -> Vec<u8> {
        match self {
            Later::Credit(c) => transfer_msg::encode_credit(c),
            Later::Step(_, step) => step_msg::encode(step),
            Later::Gathered(answers) => gather_msg::encode_response(0x1122, answers),
        }
    }

    /// True when `bytes` decode to this message.
    fn decodes_back(&self, bytes: &[u8]) -> bool {
        match self {
            Later::Credit(c) => transfer_msg::decode_credit(bytes).as_ref() == Ok(c),
            Later::Step(key, step) => step_msg::decode(key, bytes).as_ref() == Ok(step),
            Later::Gathered(answers) => {
                gather_msg::decode_response(bytes).as_ref() == Ok(&(0x1122, answers.clone()))
            }
        }
    }
}

/// The payloads of [`LATER_GOLDEN`], in its order: each carries ceiling units (6, zigzag 0x0c),
/// or ceilings.
fn later_payloads() -> Vec<Later> {
    vec![
        Later::Credit(credit(6)),
        Later::Step(
            HOME,
            Step::Move {
                receiver: HOLDER.to_vec(),
                units: Units::ceiling(6),
                now_ms: 1_000,
                new_id: 9,
            },
        ),
        Later::Step(
            HOME,
            Step::Credit(Credit {
                dv: 0,
                df: 0,
                fold_id: 0,
                ..credit(6)
            }),
        ),
        Later::Gathered(vec![
            HolderAnswer::Ceiled {
                value: 10,
                ceiling: 40,
                floor: None,
            },
            HolderAnswer::Ceiled {
                value: -3,
                ceiling: 5,
                floor: Some(-8),
            },
        ]),
    ]
}

/// Written from the layouts in `transfer_msg` and `step_msg`: a version 3 credit (0xCA's
/// version 2 bytes with its dc after df); a `CTR.STEP` MOVE (ceiled) (kind 8: receiver, dv 0,
/// df 0, now 1000 ms (zigzag 2000, d00f), new giver id 9, then dc); a `CTR.STEP` CREDIT
/// (ceiled) (kind 9: giver, 0 (its name at the debit), giver id, seq 9, dv 0, df 0, fold
/// id 0, then dc); a gather response (0xC8) of two ceiled answers (version 1, id 0x1122 as u64
/// LE, 2 answers; kind 4, value 10 (zigzag 14), ceiling 40 (50), no floor (00); kind 4,
/// value -3 (05), ceiling 5 (0a), a floor (01) of -8 (0f)).
const LATER_GOLDEN: [(&str, &str); 4] = [
    ("credit v3", "03237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d65097b6374727d686f6d6504030000000000000909080c0201000000000000"),
    ("step move (ceiled)", "0108237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d650000d00f09000000000000000c"),
    ("step credit (ceiled)", "0109237b6374722e303030303030303030303030303061622e312e307d7b6374727d686f6d6500040300000000000009000000000000000000000c"),
    ("gather response (ceiled)", "012211000000000000020414500004050a010f"),
];

#[test]
fn every_later_payload_encodes_to_its_golden_bytes_and_decodes_back() {
    let payloads = later_payloads();
    assert_eq!(payloads.len(), LATER_GOLDEN.len());
    let mut wrong = Vec::new();
    for (payload, (what, golden)) in payloads.iter().zip(LATER_GOLDEN) {
        let bytes = payload.encode();
        if hex(&bytes) != golden {
            wrong.push(format!("    (\"{what}\", \"{}\"),", hex(&bytes)));
        }
        assert!(payload.decodes_back(&bytes), "{what} decodes back");
    }
    assert!(wrong.is_empty(), "bytes changed:\n{}", wrong.join("\n"));
}

/// The audit's messages of the version before request ids (0xCE/0xCF version 1, an earlier
/// module's) still decode: an ask is answered in its version, and its answers carry no id.
#[test]
fn an_earlier_modules_audit_messages_still_decode() {
    let unhex = |h: &str| -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    };
    let (request, questions) =
        audit_msg::decode_ask(&unhex("0101ab00000000000000097b6374727d686f6d65")).unwrap();
    assert_eq!((request, questions[0].spread_id), (None, 0xab));
    let (request, answers) =
        audit_msg::decode_answers(&unhex("0101ab00000000000000097b6374727d686f6d6501")).unwrap();
    assert_eq!((request, answers[0].1), (None, Answer::Gone));
}
