//! Properties of the conversions between protobuf messages and domain types (`msg`): any
//! message, numbers out of range included, converts or gives a `ProtoError` naming one of its
//! fields, never panics and never changes a number on the way (a value it keeps is the value that
//! came, or the documented default of an unset field); arbitrary and mutated bytes decode and
//! convert without a panic; and domain values go to protobuf and back unchanged.

use coflow_core::{CoflowId, MachineId, Nanos};
use coflow_proto::{
    AgentRegistration, CoflowOptions, FlowRecovery, GetAnnouncement, Heartbeat, MAX_DEADLINE_MS, MAX_KIND_LEN,
    MAX_LEASE_MS, MAX_NAME_LEN, MAX_NUM_FLOWS, MAX_OWNER_LEN, MAX_PARENTS, MAX_PIECE_SIZE, MAX_READY_TIMEOUT_MS,
    MIN_LEASE_MS, ProtoError, PutAnnouncement, PutSource, Readiness, Registration, pb,
};
use proptest::prelude::*;
use prost::Message;

/// Numbers a field may carry, weighted toward the edges of every limit the conversions know.
fn number() -> impl Strategy<Value = u64> {
    let edges = vec![
        u64::from(u32::MAX),
        1 << 32,
        (1 << 32) + 3,
        MAX_NUM_FLOWS,
        MAX_NUM_FLOWS + 1,
        MAX_DEADLINE_MS,
        MAX_DEADLINE_MS + 1,
        MAX_READY_TIMEOUT_MS,
        MAX_READY_TIMEOUT_MS + 1,
        MIN_LEASE_MS - 1,
        MIN_LEASE_MS,
        MAX_LEASE_MS + 1,
        MAX_PIECE_SIZE,
        MAX_PIECE_SIZE + 1,
        1 << 53,
        (1 << 53) + 1,
        u64::MAX / 1_000_000 + 1,
        u64::MAX - 1,
        u64::MAX,
    ];
    prop_oneof![4 => 0u64..=16, 3 => any::<u64>(), 3 => prop::sample::select(edges), 1 => 0..=MAX_DEADLINE_MS + 2]
}

fn machine() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..8, any::<u32>(), Just(1 << 16), Just((1 << 16) - 1), Just(u32::MAX)]
}

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        0.0f64..1e12,
        prop::sample::select(vec![0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE]),
    ]
}

/// Text of any characters (control characters included), and lengths around `limit` bytes in one-
/// and two-byte characters.
fn text(limit: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => ".{0,6}",
        1 => (limit.saturating_sub(2)..limit + 3).prop_map(|n| "x".repeat(n)),
        1 => (limit / 2 - 1..limit / 2 + 2).prop_map(|n| "é".repeat(n)),
        1 => "[a-z]{0,3}\u{1b}\\[2J[a-z]{0,3}",
    ]
}

fn options() -> impl Strategy<Value = pb::CoflowOptions> {
    (
        text(MAX_NAME_LEN),
        number(),
        prop_oneof![
            prop::collection::vec(any::<u64>(), 0..4),
            (MAX_PARENTS - 1..=MAX_PARENTS + 1).prop_map(|n| vec![7; n])
        ],
        text(MAX_KIND_LEN),
        prop_oneof![0i32..=2, any::<i32>()],
        number(),
        rate(),
        number(),
    )
        .prop_map(|(name, deadline_ms, parents, kind, readiness, ready_timeout_ms, weight, lease_ms)| {
            pb::CoflowOptions { name, deadline_ms, parents, kind, readiness, ready_timeout_ms, weight, lease_ms }
        })
}

fn register() -> impl Strategy<Value = pb::RegisterRequest> {
    (number(), prop::option::of(options()), text(MAX_OWNER_LEN), any::<u64>())
        .prop_map(|(num_flows, options, owner, nonce)| pb::RegisterRequest { num_flows, options, owner, nonce })
}

fn announce_put() -> impl Strategy<Value = pb::AnnouncePutRequest> {
    let flags = (any::<bool>(), any::<bool>());
    (number(), text(256), machine(), number(), flags, prop::option::of(register()), text(MAX_OWNER_LEN)).prop_map(
        |(coflow_id, data_id, machine_id, size, (recovered, sealed), registration, client)| pb::AnnouncePutRequest {
            coflow_id,
            data_id,
            machine_id,
            size,
            recovered,
            registration,
            client,
            sealed,
        },
    )
}

fn announce_get() -> impl Strategy<Value = pb::AnnounceGetRequest> {
    (
        (number(), text(256), machine(), text(MAX_OWNER_LEN)),
        (prop_oneof![Just(0), number()], machine(), number(), number()),
        (prop_oneof![Just(0), number()], prop_oneof![Just(0), number()], prop_oneof![Just(0), number()]),
    )
        .prop_map(|((coflow_id, data_id, machine_id, client), (flow, src, size, received), (resume, at, end))| {
            pb::AnnounceGetRequest {
                coflow_id,
                data_id,
                machine_id,
                recovered_flow_id: flow,
                recovered_src_machine_id: src,
                recovered_size: size,
                recovered_bytes_received: received,
                client,
                resume_flow_id: resume,
                resume_offset: at,
                resume_end: end,
            }
        })
}

fn register_agent() -> impl Strategy<Value = pb::RegisterAgentRequest> {
    let addr = prop_oneof!["127\\.0\\.0\\.1:[0-9]{1,5}", "\\[::1\\]:[0-9]{1,5}", ".{0,12}"];
    (machine(), addr, rate(), number(), number(), text(256)).prop_map(
        |(machine_id, data_addr, port_rate_bps, inc, session, datacenter)| pb::RegisterAgentRequest {
            machine_id,
            data_addr,
            port_rate_bps,
            incarnation: inc,
            session,
            datacenter,
        },
    )
}

fn heartbeat() -> impl Strategy<Value = pb::HeartbeatRequest> {
    let flow = (number(), number()).prop_map(|(flow_id, bytes_sent)| pb::FlowProgress { flow_id, bytes_sent });
    (machine(), prop::collection::vec(flow, 0..4), rate(), rate(), prop::collection::vec(number(), 0..4)).prop_map(
        |(machine_id, flows, tx_bps, rx_bps, unread_flow_ids)| pb::HeartbeatRequest {
            machine_id,
            flows,
            tx_bps,
            rx_bps,
            unread_flow_ids,
        },
    )
}

fn put_source() -> impl Strategy<Value = pb::put_request::Source> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..16).prop_map(pb::put_request::Source::Content),
        (
            prop_oneof![".{0,8}", Just(String::new()), Just("a\0b".to_string()), Just("p".repeat(4097))],
            number(),
            number()
        )
            .prop_map(|(path, offset, length)| pb::put_request::Source::File(pb::FileSegment {
                path,
                offset,
                length
            })),
    ]
}

/// Checks a refusal names one of `fields`, in its message too.
fn names_a_field(e: &ProtoError, fields: &[&str]) -> Result<(), TestCaseError> {
    prop_assert!(fields.contains(&e.field()), "{e} names no field of {fields:?}");
    prop_assert!(e.to_string().contains(e.field()), "{e}");
    Ok(())
}

const OPTIONS_FIELDS: [&str; 7] = [
    "options.name",
    "options.kind",
    "options.parents",
    "options.weight",
    "options.readiness",
    "options.deadline_ms",
    "options.lease_ms",
];
const REGISTER_FIELDS: [&str; 10] = [
    OPTIONS_FIELDS[0],
    OPTIONS_FIELDS[1],
    OPTIONS_FIELDS[2],
    OPTIONS_FIELDS[3],
    OPTIONS_FIELDS[4],
    OPTIONS_FIELDS[5],
    OPTIONS_FIELDS[6],
    "options.ready_timeout_ms",
    "num_flows",
    "owner",
];

/// The options as a conversion that keeps every number hands them back: an unset weight is 1, an
/// unset readiness is on-get (whose wait does not apply), an all-gets wait of 0 is the default 10 s.
fn normalized_options(o: Option<pb::CoflowOptions>) -> pb::CoflowOptions {
    let mut o = o.unwrap_or_default();
    if o.weight == 0.0 {
        o.weight = 1.0;
    }
    if o.readiness != pb::Readiness::AllGets as i32 {
        o.readiness = pb::Readiness::OnGet as i32;
        o.ready_timeout_ms = 0;
    } else if o.ready_timeout_ms == 0 {
        o.ready_timeout_ms = 10_000;
    }
    o
}

/// A registration as a conversion that keeps every number hands it back.
fn normalized(r: &pb::RegisterRequest) -> pb::RegisterRequest {
    pb::RegisterRequest { options: Some(normalized_options(r.options.clone())), ..r.clone() }
}

/// Any registration converts, with every number as it came, or is refused naming a field.
fn check_registration(m: &pb::RegisterRequest) -> Result<(), TestCaseError> {
    match Registration::try_from(m.clone()) {
        Err(e) => names_a_field(&e, &REGISTER_FIELDS)?,
        Ok(r) => {
            prop_assert_eq!(u64::from(r.num_flows), m.num_flows, "num_flows changed");
            prop_assert_eq!(pb::RegisterRequest::from(&r), normalized(m), "a number changed on the way");
        }
    }
    Ok(())
}

fn options_domain() -> impl Strategy<Value = CoflowOptions> {
    let ms = |max: u64| (1..=max).prop_map(Nanos::from_millis);
    (
        text(MAX_NAME_LEN).prop_filter("fits", |s| s.len() <= MAX_NAME_LEN && !s.chars().any(char::is_control)),
        prop::option::of(ms(MAX_DEADLINE_MS)),
        prop::collection::vec(any::<u64>().prop_map(CoflowId), 0..4),
        "[a-z]{0,12}",
        prop_oneof![
            Just(Readiness::OnGet),
            ms(MAX_READY_TIMEOUT_MS).prop_map(|timeout| Readiness::AllGets { timeout })
        ],
        prop_oneof![Just(1.0), (1e-9f64..1e9)],
        prop::option::of((MIN_LEASE_MS..=MAX_LEASE_MS).prop_map(Nanos::from_millis)),
    )
        .prop_map(|(name, deadline, parents, kind, readiness, weight, lease)| CoflowOptions {
            name,
            deadline,
            parents,
            kind,
            readiness,
            weight,
            lease,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_registration_converts_exactly_or_names_its_field(m in register()) {
        check_registration(&m)?;
    }

    #[test]
    fn any_put_announcement_converts_exactly_or_names_its_field(m in announce_put()) {
        match PutAnnouncement::try_from(m.clone()) {
            Err(e) => {
                let mut fields = REGISTER_FIELDS.to_vec();
                fields.extend(["data_id", "size", "client"]);
                names_a_field(&e, &fields)?;
            }
            Ok(a) => {
                prop_assert_eq!(
                    (a.coflow, a.data_id.as_str(), a.machine, a.size, a.recovered, a.client.as_str(), a.sealed),
                    (CoflowId(m.coflow_id), m.data_id.as_str(), MachineId(m.machine_id), m.size, m.recovered, m.client.as_str(), m.sealed)
                );
                prop_assert_eq!(a.registration.as_ref().map(pb::RegisterRequest::from), m.registration.as_ref().map(normalized));
            }
        }
    }

    #[test]
    fn any_get_announcement_converts_exactly_or_names_its_field(m in announce_get()) {
        match GetAnnouncement::try_from(m.clone()) {
            Err(e) => names_a_field(&e, &["data_id", "client", "resume_offset", "resume_end"])?,
            Ok(a) => {
                prop_assert_eq!(
                    (a.coflow, a.data_id.as_str(), a.machine, a.client.as_str()),
                    (CoflowId(m.coflow_id), m.data_id.as_str(), MachineId(m.machine_id), m.client.as_str())
                );
                let resume = (m.resume_flow_id != 0).then_some((coflow_core::FlowId(m.resume_flow_id), m.resume_offset));
                prop_assert_eq!(a.resume, resume);
                let end = (m.resume_end != 0).then_some(m.resume_end);
                prop_assert_eq!(a.resume_end, end);
                prop_assert!(end.is_none_or(|e| resume.is_some_and(|(_, at)| e > at)));
            }
        }
        match FlowRecovery::from_request(&m) {
            Err(e) => names_a_field(&e, &["data_id", "recovered_size", "recovered_bytes_received"])?,
            Ok(None) => prop_assert_eq!(m.recovered_flow_id, 0),
            Ok(Some(r)) => prop_assert_eq!(
                (r.flow.0, r.coflow.0, r.src.0, r.dst.0, r.size, r.received),
                (m.recovered_flow_id, m.coflow_id, m.recovered_src_machine_id, m.machine_id, m.recovered_size, m.recovered_bytes_received)
            ),
        }
    }

    #[test]
    fn any_agent_registration_converts_exactly_or_names_its_field(m in register_agent()) {
        match AgentRegistration::try_from(m.clone()) {
            Err(e) => names_a_field(&e, &["machine_id", "data_addr", "port_rate_bps", "datacenter"])?,
            Ok(a) => {
                prop_assert_eq!(a.machine, MachineId(m.machine_id));
                prop_assert_eq!(&a.datacenter, &m.datacenter);
                prop_assert_eq!(a.port_rate.to_bits(), m.port_rate_bps.to_bits());
                prop_assert_eq!(Ok(a.data_addr), m.data_addr.parse());
            }
        }
    }

    #[test]
    fn any_heartbeat_converts_exactly_or_names_its_field(m in heartbeat()) {
        match Heartbeat::try_from(m.clone()) {
            Err(e) => names_a_field(&e, &["tx_bps", "rx_bps", "flows"])?,
            Ok(h) => {
                let flows: Vec<(u64, u64)> = h.flows.iter().map(|&(f, b)| (f.0, b)).collect();
                let sent: Vec<(u64, u64)> = m.flows.iter().map(|f| (f.flow_id, f.bytes_sent)).collect();
                prop_assert_eq!(flows, sent);
                prop_assert_eq!(h.unread.iter().map(|f| f.0).collect::<Vec<_>>(), m.unread_flow_ids.clone());
                prop_assert_eq!((h.machine, h.tx_bps.to_bits(), h.rx_bps.to_bits()), (MachineId(m.machine_id), m.tx_bps.to_bits(), m.rx_bps.to_bits()));
            }
        }
    }

    #[test]
    fn any_put_source_converts_exactly_or_names_its_field(m in put_source()) {
        match PutSource::try_from(m.clone()) {
            Err(e) => names_a_field(&e, &["file.path", "file.length", "file.offset"])?,
            Ok(s) => prop_assert_eq!(pb::put_request::Source::from(s), m),
        }
    }

    /// Arbitrary bytes, and valid encodings with bytes flipped, decode and convert without a
    /// panic: each message that decodes converts or names a field.
    #[test]
    fn arbitrary_and_mutated_bytes_never_panic(
        raw in prop::collection::vec(any::<u8>(), 0..64),
        valid in register(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let put = pb::AnnouncePutRequest { registration: Some(valid.clone()), ..Default::default() };
        let mut mutated = put.encode_to_vec();
        for (i, b) in &flips {
            let at = i.index(mutated.len());
            mutated[at] ^= b | 1;
        }
        for bytes in [&raw, &mutated, &valid.encode_to_vec()] {
            if let Ok(m) = pb::RegisterRequest::decode(bytes.as_slice()) {
                check_registration(&m)?;
            }
            if let Ok(m) = pb::AnnouncePutRequest::decode(bytes.as_slice()) {
                let _ = PutAnnouncement::try_from(m);
            }
            if let Ok(m) = pb::AnnounceGetRequest::decode(bytes.as_slice()) {
                let _ = (GetAnnouncement::try_from(m.clone()), FlowRecovery::from_request(&m));
            }
            if let Ok(m) = pb::RegisterAgentRequest::decode(bytes.as_slice()) {
                let _ = AgentRegistration::try_from(m);
            }
            if let Ok(m) = pb::HeartbeatRequest::decode(bytes.as_slice()) {
                let _ = Heartbeat::try_from(m);
            }
            if let Ok(pb::PutRequest { source: Some(s), .. }) = pb::PutRequest::decode(bytes.as_slice()) {
                let _ = PutSource::try_from(s);
            }
        }
    }

    /// Domain → protobuf → domain gives back the same options and registration.
    #[test]
    fn domain_values_round_trip(
        o in options_domain(),
        num_flows in 0..=MAX_NUM_FLOWS as u32,
        owner in "(coflow://client/[a-z]{1,8})?",
        nonce in any::<u64>(),
    ) {
        prop_assert_eq!(&CoflowOptions::try_from(pb::CoflowOptions::from(&o)).unwrap(), &o);
        let r = Registration { num_flows, options: o, owner, nonce };
        prop_assert_eq!(Registration::try_from(pb::RegisterRequest::from(&r)).unwrap(), r);
    }

    /// A time that is not a whole number of milliseconds goes out rounded up, never down and
    /// never to "none".
    #[test]
    fn times_go_out_rounded_up_to_the_millisecond(deadline in 0..MAX_DEADLINE_MS * 1_000_000, wait in 0..MAX_READY_TIMEOUT_MS * 1_000_000) {
        let o = CoflowOptions {
            deadline: Some(Nanos(deadline)),
            readiness: Readiness::AllGets { timeout: Nanos(wait) },
            weight: 1.0,
            ..Default::default()
        };
        let back = CoflowOptions::try_from(pb::CoflowOptions::from(&o)).unwrap();
        let d = back.deadline.expect("a deadline stays a deadline").get();
        prop_assert!(d >= deadline && d < deadline + 1_000_000 + 1, "{deadline} ns went out as {d} ns");
        let Readiness::AllGets { timeout } = back.readiness else { panic!("readiness changed") };
        prop_assert!(timeout.get() >= wait && timeout.get() < wait + 1_000_000 + 1, "{wait} ns went out as {timeout:?}");
    }
}
