//! The core under random inputs, many of them wrong, checked after every step against counts made
//! afresh and against the bounds it keeps.

use coflow_coordinator::{CoordError, CoordinatorConfig, FlowOutcome, Transmit};
use coflow_core::{CoflowId, FlowId, MachineId, Nanos};
use coflow_proto::{AgentRegistration, CoflowOptions, DataId, PutAnnouncement, Readiness, Registration};

use super::{CAP, Harness};

/// A small seeded generator, so the random drive below replays from its seed.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random inputs, many of them wrong (unknown ids, dead machines, duplicate pieces, leases run
/// out), under several policies: the core answers each without panicking, sends rates only to
/// agents that watch and never above a port's rate, renews exactly the live coflows, and after
/// `handle_timeout(now)` never asks to run again at or before `now` (the service would spin).
/// Rates may pass a port's by a rounding error.
#[test]
fn random_inputs_keep_the_core_sound() {
    const MACHINES: u32 = 4;
    let (mut owner_refusals, mut source_refusals) = (0, 0);
    for seed in 1..=60u64 {
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let policy = ["varys", "fair", "varys-deadline", "aalo", "sincronia"][(seed % 5) as usize];
        let bypass = if seed % 2 == 0 { 0 } else { 3000 };
        let cfg = CoordinatorConfig {
            bypass_threshold_bytes: bypass,
            agent_timeout_ms: 1000,
            max_coflows: 6,
            max_coflows_per_owner: 4,
            max_pieces_per_coflow: 4,
            max_pieces_per_owner: 5,
            max_gets_per_owner_per_source: 1,
            ..Default::default()
        };
        let mut h = Harness::new(policy, MACHINES, cfg);
        let mut watching: Vec<bool> = vec![true; MACHINES as usize];
        let (mut coflows, mut flows): (Vec<CoflowId>, Vec<FlowId>) = (Vec::new(), Vec::new());
        // Coflows of two identities and of none (token mode), each changed by its owner.
        const OWNERS: [&str; 3] = ["", "coflow://client/a", "coflow://client/b"];
        let mut owner_of: std::collections::HashMap<CoflowId, &str> = std::collections::HashMap::new();
        for step in 0..1500 {
            let at = format!("seed {seed}, step {step}, policy {policy}");
            let coflow = |rng: &mut XorShift, coflows: &[CoflowId]| {
                if coflows.is_empty() || rng.below(8) == 0 {
                    CoflowId(999_999)
                } else {
                    coflows[rng.below(coflows.len() as u64) as usize]
                }
            };
            let machine = MachineId(rng.below(u64::from(MACHINES) + 1) as u32);
            match rng.below(11) {
                0 => {
                    let readiness = if rng.below(2) == 0 {
                        Readiness::OnGet
                    } else {
                        Readiness::AllGets { timeout: Nanos::from_millis(50) }
                    };
                    let deadline = (rng.below(3) == 0).then(|| Nanos::from_millis(100 + rng.below(5000)));
                    // A second's lease: some run out between the steps that renew them.
                    let lease = (rng.below(3) == 0).then(|| Nanos::from_secs(1));
                    let options = CoflowOptions { readiness, deadline, lease, ..Default::default() };
                    let owner = OWNERS[rng.below(3) as usize];
                    let reg = Registration {
                        num_flows: rng.below(4) as u32,
                        options,
                        owner: owner.into(),
                        ..Default::default()
                    };
                    if let Ok(id) = h.core.handle_register(h.now, reg) {
                        coflows.push(id);
                        owner_of.insert(id, owner);
                    }
                }
                1 | 2 => {
                    let c = coflow(&mut rng, &coflows);
                    let by = owner_of.get(&c).copied().unwrap_or("");
                    // What the owner's live coflows hold before the put: its bound is met exactly.
                    let held: u32 =
                        h.core.coflows().filter(|k| owner_of.get(&k.id).copied() == Some(by)).map(|k| k.puts).sum();
                    let put = PutAnnouncement {
                        coflow: c,
                        data_id: DataId::new(format!("p{}", rng.below(5))).unwrap(),
                        machine,
                        size: 1 + rng.below(5000),
                        recovered: false,
                        registration: None,
                        client: by.into(),
                        sealed: false,
                    };
                    match h.core.handle_put(h.now, put) {
                        Err(CoordError::LimitExceeded(m)) if m.contains("max_pieces_per_owner") => {
                            assert!(!by.is_empty() && held == 5, "{at}: {m}, with {held} held by {by:?}");
                            owner_refusals += 1;
                        }
                        Ok(_) => assert!(by.is_empty() || held < 5, "{at}: {by} holds {held} pieces and one more"),
                        Err(_) => {}
                    }
                }
                3 | 4 => {
                    let c = coflow(&mut rng, &coflows);
                    let by = owner_of.get(&c).copied().unwrap_or("");
                    let id = format!("p{}", rng.below(5));
                    // The flows of `by`'s coflows that machine `src` serves another machine.
                    let served = |h: &Harness, src: MachineId| {
                        let own = h.core.coflows().filter(|k| owner_of.get(&k.id).copied() == Some(by));
                        own.flat_map(|k| h.core.flows_of(k.id)).filter(|f| f.src == src && f.dst != src).count()
                    };
                    match h.get_by(by, c, &id, machine.0) {
                        Ok(g) => {
                            assert!(!flows.contains(&g.flow), "{at}: a flow id granted twice");
                            flows.push(g.flow);
                            assert!(by.is_empty() || served(&h, g.src) <= 1, "{at}: {by} got past its bound");
                        }
                        Err(CoordError::LimitExceeded(m)) => {
                            let src = m.split("machine ").nth(1).and_then(|s| s.split(' ').next()?.parse().ok());
                            let src = MachineId(src.unwrap_or_else(|| panic!("{at}: {m} names no machine")));
                            assert!(m.contains("max_gets_per_owner_per_source"), "{at}: {m}");
                            assert_eq!(served(&h, src), 1, "{at}: {m}");
                            source_refusals += 1;
                        }
                        Err(_) => {}
                    }
                }
                5 if !flows.is_empty() => {
                    let f = flows.swap_remove(rng.below(flows.len() as u64) as usize);
                    let outcome = if rng.below(3) == 0 {
                        FlowOutcome::Failed("data-lost".into())
                    } else {
                        FlowOutcome::Completed
                    };
                    let _ = h.end(f, outcome);
                }
                6 => {
                    let c = coflow(&mut rng, &coflows);
                    let by = owner_of.get(&c).copied().unwrap_or("");
                    match rng.below(3) {
                        0 => drop(h.core.handle_seal(h.now, by, c)),
                        1 => {
                            if h.core.handle_unregister(h.now, by, c).is_ok() {
                                coflows.retain(|&x| x != c);
                            }
                        }
                        _ => {
                            let not_renewed = h.core.handle_renew(h.now, by, &[c]);
                            let live = h.core.coflows().any(|k| k.id == c);
                            assert_eq!(not_renewed.is_empty(), live, "{at}: renewal of {c:?}");
                        }
                    }
                }
                7 => {
                    let progress = flows.iter().map(|&f| (f, rng.below(6000))).collect();
                    h.heartbeat(machine.0, progress);
                }
                8 if machine.0 < MACHINES => match rng.below(3) {
                    0 => {
                        let a = AgentRegistration {
                            machine,
                            data_addr: format!("127.0.0.1:{}", 9000 + machine.0).parse().unwrap(),
                            port_rate: CAP,
                            datacenter: String::new(),
                        };
                        h.core.handle_register_agent(h.now, a).unwrap();
                    }
                    1 => {
                        h.core.handle_unwatch(machine);
                        watching[machine.0 as usize] = false;
                    }
                    _ => {
                        for &(_, r) in &h.core.handle_watch(h.now, machine) {
                            assert!((0.0..=CAP * (1.0 + 1e-12)).contains(&r) || r == f64::INFINITY, "{at}: rate {r}");
                        }
                        watching[machine.0 as usize] = true;
                    }
                },
                _ => {
                    h.now = h.now + Nanos::from_millis(rng.below(200));
                    // Machine 3 stays silent now and then, so it is declared dead.
                    for m in 0..MACHINES - u32::from(rng.below(4) == 0) {
                        h.heartbeat(m, vec![]);
                    }
                    h.core.handle_timeout(h.now);
                    if let Some(t) = h.core.poll_timeout() {
                        assert!(t > h.now, "{at}: asked to run again at {t:?}, now {:?}", h.now);
                    }
                }
            }
            h.core.recount().unwrap_or_else(|e| panic!("{at}: {e}"));
            while let Some(t) = h.core.poll_transmit() {
                match t {
                    Transmit::Rates(m, batch) => {
                        assert!(watching[m.0 as usize], "{at}: rates for {m}, which does not watch");
                        for (_, r) in batch {
                            // A scheduled flow's rate fits its port; an unscheduled one is not paced.
                            assert!((0.0..=CAP * (1.0 + 1e-12)).contains(&r) || r == f64::INFINITY, "{at}: rate {r}");
                        }
                    }
                    Transmit::Notice(m, _) => assert!(watching[m.0 as usize], "{at}: a notice for {m}"),
                    Transmit::EndWatch(m) => {
                        assert!(watching[m.0 as usize], "{at}: ends {m}'s stream, which is not open");
                        watching[m.0 as usize] = false;
                    }
                }
            }
            let st = h.core.status();
            assert_eq!(st.coflows.len(), h.core.live_coflows(), "{at}");
            assert!(h.core.scheduled_coflows() <= h.core.live_coflows(), "{at}");
            assert!(st.coflows.iter().map(|c| c.flows.len()).sum::<usize>() <= h.core.live_flows(), "{at}");
        }
    }
    assert!(owner_refusals > 0, "no put met an owner's bound: the owners' counts went untried");
    assert!(source_refusals > 0, "no get met an owner's bound on a source: its counts went untried");
}
