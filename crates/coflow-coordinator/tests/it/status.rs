//! Status pages: within their budget, and for a member its own coflows among every other's.

use coflow_coordinator::CoordinatorConfig;
use coflow_core::CoflowId;
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
