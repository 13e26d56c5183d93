//! `plugins/nodeunschedulable/node_unschedulable_test.go`.

use rkube_framework::{Code, CycleState};
use rkube_model::TaintEffect;
use rkube_plugins::node_unschedulable::{NodeUnschedulable, ERR_REASON_UNSCHEDULABLE};

use crate::common::*;

#[test]
fn test_node_unschedulable() {
    let cases = vec![
        (
            "Does not schedule pod to unschedulable node (node.Spec.Unschedulable==true)",
            pod().obj(),
            node("").unschedulable(true).obj(),
            status(
                Code::UnschedulableAndUnresolvable,
                &[ERR_REASON_UNSCHEDULABLE],
            ),
        ),
        (
            "Schedule pod to normal node",
            pod().obj(),
            node("").unschedulable(false).obj(),
            success(),
        ),
        (
            "Schedule pod with toleration to unschedulable node (node.Spec.Unschedulable==true)",
            pod()
                .tolerations(vec![tol_equal(
                    "node.kubernetes.io/unschedulable",
                    "",
                    Some(TaintEffect::NoSchedule),
                )])
                .obj(),
            node("").unschedulable(true).obj(),
            success(),
        ),
    ];
    let mut f = Failures::new();
    for (name, p, n, want) in cases {
        let ni = node_info(n, vec![]);
        let got = filter(&NodeUnschedulable, &CycleState::new(), &p, &ni);
        f.check(name, "filter status", got, want);
    }
    f.finish();
}
