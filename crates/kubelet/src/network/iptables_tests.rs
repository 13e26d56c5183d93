use super::*;

#[test]
fn the_plan_is_upstreams() {
    assert_eq!(
        plan(true),
        vec![Step::Chain {
            table: "mangle",
            chain: "KUBE-IPTABLES-HINT"
        }]
    );
    let v4 = plan(false);
    assert_eq!(v4.len(), 5);
    assert_eq!(v4[0], plan(true)[0]);
    assert_eq!(
        v4[1],
        Step::Chain {
            table: "filter",
            chain: "KUBE-FIREWALL"
        }
    );
    for (step, chain) in v4[2..4].iter().zip(["OUTPUT", "INPUT"]) {
        assert_eq!(
            step,
            &Step::Rule {
                table: "filter",
                chain,
                position: Position::Prepend,
                args: vec!["-j", "KUBE-FIREWALL"],
            }
        );
    }
    let Step::Rule {
        chain,
        position,
        args,
        ..
    } = &v4[4]
    else {
        panic!("{:?}", v4[4]);
    };
    assert_eq!((*chain, *position), ("KUBE-FIREWALL", Position::Append));
    assert_eq!(
        args.join(" "),
        "-m comment --comment block incoming localnet connections --dst 127.0.0.0/8 \
         ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"
    );
}

/// A network namespace of the test's own, removed on drop.
struct Netns(String);

impl Netns {
    /// `None` when one cannot be made (not root, no `ip`).
    fn new() -> Option<Netns> {
        let name = format!("rkipt{}", std::process::id());
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Netns(name))
    }

    fn iptables(&self) -> Iptables {
        Iptables::with(
            ["ip", "netns", "exec", &self.0, "iptables"]
                .map(String::from)
                .to_vec(),
            false,
        )
    }

    /// `iptables ARGS` in the namespace, its output.
    fn show(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.0, "iptables"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn rules_are_made_once_and_made_again_after_a_flush() {
    let Some(ns) = Netns::new() else {
        eprintln!("not root (or no `ip netns`): skipping");
        return;
    };
    let ipt = ns.iptables();
    if !ipt.works() {
        eprintln!("no iptables: skipping");
        return;
    }
    let rules = |ns: &Netns| {
        (
            ns.show(&["-t", "mangle", "-S"]),
            ns.show(&["-t", "filter", "-S"]),
        )
    };
    ipt.sync().unwrap();
    ipt.ensure_canary().unwrap();
    let (mangle, filter) = rules(&ns);
    assert!(mangle.contains("-N KUBE-IPTABLES-HINT"), "{mangle}");
    assert!(mangle.contains("-N KUBE-KUBELET-CANARY"), "{mangle}");
    assert!(
        filter.contains(
            "-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"
        ),
        "{filter}"
    );
    // Jumped to first from INPUT and OUTPUT.
    for chain in ["INPUT", "OUTPUT"] {
        let first = filter
            .lines()
            .find(|l| l.starts_with(&format!("-A {chain} ")));
        assert_eq!(
            first,
            Some(format!("-A {chain} -j KUBE-FIREWALL").as_str()),
            "{filter}"
        );
    }
    // Idempotent: a second pass adds nothing.
    ipt.sync().unwrap();
    ipt.ensure_canary().unwrap();
    assert_eq!(rules(&ns), (mangle.clone(), filter.clone()));
    assert!(!ipt.canary_gone());
    // A flush (rules and chains) takes the canary with it; the next check
    // makes everything again.
    for table in ["mangle", "nat", "filter"] {
        ns.show(&["-t", table, "-F"]);
        ns.show(&["-t", table, "-X"]);
    }
    assert!(ipt.canary_gone());
    keep(&ipt);
    assert_eq!(rules(&ns), (mangle, filter));
    assert!(!ipt.canary_gone());
}

#[test]
fn a_missing_command_is_an_error_not_a_panic() {
    let ipt = Iptables::with(vec!["/nonexistent/iptables".into()], false);
    assert!(
        !ipt.works(),
        "skipped, as upstream skips a family not present"
    );
    assert!(ipt.sync().unwrap_err().contains("/nonexistent/iptables"));
    assert!(!ipt.canary_gone(), "unknown is not gone");
}
