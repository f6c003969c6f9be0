//! Status pages: within their budget, and for a member its own coflows among every other's; and
//! the completion times the core observes for the metrics.

use coflow_coordinator::{CoordinatorConfig, FlowOutcome, Observation};
use coflow_core::{CoflowId, FlowId, Nanos};
use coflow_proto::CoflowOptions;

use super::Harness;

/// A status page stays within its budget: a coflow whose flows alone pass it comes alone, with
/// the flows that fit and the count of the rest; the next coflow comes on the next page.
#[test]
fn a_coflow_whose_flows_pass_a_status_page_comes_with_those_that_fit() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig::default());
    let wide = h.register(0, CoflowOptions::default());
    let next = h.register(1, CoflowOptions::default());
    // 7,000 flows of 256-byte data ids: about 2.2 MB of status, past a page's 2 MB.
    let id = |i: usize| format!("{i:0>256}");
    for i in 0..7000 {
        h.put(wide, &id(i), 0, 1000).unwrap();
        h.get(wide, &id(i), 1).unwrap();
    }
    h.put(next, "p", 0, 1000).unwrap();
    h.get(next, "p", 1).unwrap();
    let page = h.core.status_page(CoflowId(0), 1000, None);
    assert_eq!(page.view.coflows.len(), 1, "the wide coflow alone");
    let shown = page.view.coflows[0].flows.len() as u64;
    assert!(
        page.flows_omitted > 0 && shown + page.flows_omitted == 7000,
        "{shown} shown, {} omitted",
        page.flows_omitted
    );
    let bytes: usize = page.view.coflows[0].flows.iter().map(|f| 64 + f.data_id.len()).sum();
    assert!(bytes <= coflow_coordinator::STATUS_PAGE_BYTES, "{bytes} bytes of flows");
    let after = page.next.expect("a next page");
    let page = h.core.status_page(after, 1000, None);
    assert_eq!(page.view.coflows.iter().map(|c| c.id).collect::<Vec<_>>(), [next]);
    assert_eq!((page.view.coflows[0].flows.len(), page.flows_omitted), (1, 0));
}

/// A member's status pages show its own coflows and those without an owner, by id, page after
/// page, and never another member's, however many it holds; the admin sees every coflow.
#[test]
fn a_members_status_pages_show_its_own_coflows_among_many_others() {
    let mut h = Harness::new("varys", 2, CoordinatorConfig::default());
    let owned = |h: &mut Harness, owner: &str| h.register_by(owner).unwrap();
    let mut expected = Vec::new();
    for i in 0..3000 {
        match i % 1000 {
            10 | 500 => expected.push(owned(&mut h, "a")),
            700 => expected.push(h.register(1, CoflowOptions::default())),
            _ => drop(owned(&mut h, "b")),
        }
    }
    let gone = expected.remove(1);
    h.core.handle_unregister(h.now, "a", gone).unwrap();
    let (mut seen, mut after) = (Vec::new(), CoflowId(0));
    loop {
        let page = h.core.status_page(after, 2, Some("a"));
        assert!(page.view.coflows.len() <= 2);
        seen.extend(page.view.coflows.iter().map(|c| c.id));
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(seen, expected);
    assert_eq!(h.core.status_page(CoflowId(0), 5000, Some(coflow_coordinator::ADMIN)).view.coflows.len(), 2999);
    h.core.recount().unwrap();
}

/// A coflow's completion time is observed once, from its first get to the end of its last wave:
/// when the last get it expects ends, or, expecting no number, when it is unregistered; a coflow
/// unregistered with flows running is not observed.
#[test]
fn a_coflow_s_completion_is_observed_once_at_the_end_of_its_last_wave() {
    let mut h = Harness::new("varys", 4, CoordinatorConfig { bypass_threshold_bytes: 0, ..Default::default() });
    let completed = |h: &mut Harness| {
        let mut ccts = Vec::new();
        while let Some(o) = h.core.poll_observation() {
            if let Observation::Completed { cct, .. } = o {
                ccts.push(cct);
            }
        }
        ccts
    };
    let waves = |h: &mut Harness, c: CoflowId| {
        for (i, m) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
            h.put(c, &format!("p{i}"), m, 1000).unwrap();
        }
        for wave in [["p0", "p2"], ["p1", "p3"]] {
            let flows: Vec<FlowId> = wave.iter().map(|p| h.get(c, p, 2).unwrap().flow).collect();
            h.advance(100);
            for f in flows {
                h.finish(f);
            }
            h.advance(50);
        }
    };
    // Four gets expected, in two waves 150 ms apart: one observation, of 250 ms.
    let c = h.register(4, CoflowOptions::default());
    waves(&mut h, c);
    assert_eq!(completed(&mut h), [Nanos::from_millis(250)]);
    h.core.handle_unregister(h.now, "", c).unwrap();
    assert_eq!(completed(&mut h), [], "observed once");
    // No number expected: observed when unregistered, to the end of its last wave.
    let c = h.register(0, CoflowOptions::default());
    waves(&mut h, c);
    assert_eq!(completed(&mut h), []);
    h.advance(1000);
    h.core.handle_unregister(h.now, "", c).unwrap();
    assert_eq!(completed(&mut h), [Nanos::from_millis(250)]);
    // Unregistered with a flow of its second wave running: no completion.
    let c = h.register(0, CoflowOptions::default());
    h.put(c, "p", 0, 1000).unwrap();
    let first = h.get(c, "p", 2).unwrap().flow;
    h.advance(10);
    h.finish(first);
    h.get(c, "p", 3).unwrap();
    h.advance(10);
    h.core.handle_unregister(h.now, "", c).unwrap();
    assert_eq!(completed(&mut h), []);
    // Its one flow failed, then the get asked again delivered: observed then, not at the failure.
    let c = h.register(1, CoflowOptions::default());
    h.put(c, "p", 0, 1000).unwrap();
    let failed = h.get(c, "p", 2).unwrap().flow;
    h.advance(100);
    h.end(failed, FlowOutcome::Failed("client-departed".into())).unwrap();
    assert_eq!(completed(&mut h), [], "a failed flow completes nothing");
    let again = h.get(c, "p", 2).unwrap().flow;
    h.advance(200);
    h.finish(again);
    assert_eq!(completed(&mut h), [Nanos::from_millis(300)]);
    // A local flow that outlives the scheduled one ends the coflow.
    let c = h.register(2, CoflowOptions::default());
    h.put(c, "p", 0, 1000).unwrap();
    let remote = h.get(c, "p", 2).unwrap().flow;
    let local = h.get(c, "p", 0).unwrap().flow;
    h.advance(100);
    h.finish(remote);
    assert_eq!(completed(&mut h), []);
    h.advance(50);
    h.finish(local);
    assert_eq!(completed(&mut h), [Nanos::from_millis(150)]);
}
