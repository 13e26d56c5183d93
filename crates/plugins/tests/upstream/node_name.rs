//! `plugins/nodename/node_name_test.go`.

use rkube_framework::{Code, CycleState, Snapshot};
use rkube_plugins::node_name::{NodeName, ERR_REASON};

use crate::common::*;

#[test]
fn test_node_name() {
    let cases = vec![
        ("no host specified", pod().obj(), node("").obj(), success()),
        (
            "host matches",
            pod().node("foo").obj(),
            node("foo").obj(),
            success(),
        ),
        (
            "host doesn't match",
            pod().node("bar").obj(),
            node("foo").obj(),
            status(Code::UnschedulableAndUnresolvable, &[ERR_REASON]),
        ),
    ];
    let mut f = Failures::new();
    for (name, p, n, want) in cases {
        let ni = node_info(n, vec![]);
        let got = filter(&NodeName, &CycleState::new(), &p, &ni);
        f.check(name, "filter status", got, want);
    }
    f.finish();
}

#[test]
fn test_node_name_pre_filter() {
    let cases = vec![
        (
            "assigned pod with nodeName set, prefilter restricts to assigned node",
            pod().node("foo").obj(),
            Some(names(&["foo"])),
        ),
        (
            "unassigned pod without nodeName set, prefilter returns nil",
            pod().obj(),
            None,
        ),
    ];
    let mut f = Failures::new();
    for (name, p, want) in cases {
        let (res, st) = pre_filter(&NodeName, &mut CycleState::new(), &p, &Snapshot::default());
        f.check(name, "prefilter status is success", st.is_success(), true);
        f.check(name, "prefilter result", res, want);
    }
    f.finish();
}
