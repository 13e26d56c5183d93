//! Upstream's DNS configuration cases (`pkg/kubelet/network/dns`), as
//! inputs and expected resolver settings.

use super::*;
use std::collections::BTreeSet;

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn resolver_files_are_read_as_upstream_reads_them() {
    // (file, nameservers, searches, options as a set); None: an error.
    type Case = (
        &'static str,
        Option<(
            &'static [&'static str],
            &'static [&'static str],
            &'static [&'static str],
        )>,
    );
    let cases: &[Case] = &[
        ("", Some((&[], &[], &[]))),
        (" ", Some((&[], &[], &[]))),
        ("\n", Some((&[], &[], &[]))),
        ("\t\n\t", Some((&[], &[], &[]))),
        ("#comment\n", Some((&[], &[], &[]))),
        (" #comment\n", Some((&[], &[], &[]))),
        ("#comment\n#comment", Some((&[], &[], &[]))),
        ("#comment\nnameserver", None),
        ("#comment\nnameserver\nsearch", None),
        ("#comment\nnameserver 1.2.3.4\nsearch", Some((&["1.2.3.4"], &[], &[]))),
        ("nameserver 1.2.3.4", Some((&["1.2.3.4"], &[], &[]))),
        (" nameserver 1.2.3.4", Some((&["1.2.3.4"], &[], &[]))),
        ("\tnameserver 1.2.3.4", Some((&["1.2.3.4"], &[], &[]))),
        ("nameserver\t1.2.3.4", Some((&["1.2.3.4"], &[], &[]))),
        ("nameserver \t 1.2.3.4", Some((&["1.2.3.4"], &[], &[]))),
        ("nameserver 1.2.3.4\nnameserver 5.6.7.8", Some((&["1.2.3.4", "5.6.7.8"], &[], &[]))),
        ("nameserver 1.2.3.4 #comment", Some((&["1.2.3.4"], &[], &[]))),
        ("search ", Some((&[], &[], &[]))),
        ("search .", Some((&[], &[], &[]))),
        ("search . foo", Some((&[], &["foo"], &[]))),
        ("search foo .", Some((&[], &["foo"], &[]))),
        ("search foo .  bar", Some((&[], &["foo", "bar"], &[]))),
        ("search foo", Some((&[], &["foo"], &[]))),
        ("search foo bar", Some((&[], &["foo", "bar"], &[]))),
        ("search foo. bar", Some((&[], &["foo", "bar"], &[]))),
        ("search foo bar bat\n", Some((&[], &["foo", "bar", "bat"], &[]))),
        ("search foo\nsearch bar", Some((&[], &["bar"], &[]))),
        ("nameserver 1.2.3.4\nsearch foo bar", Some((&["1.2.3.4"], &["foo", "bar"], &[]))),
        (
            "nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar",
            Some((&["1.2.3.4", "5.6.7.8"], &["bar"], &[])),
        ),
        (
            "#comment\nnameserver 1.2.3.4\n#comment\nsearch foo\ncomment",
            Some((&["1.2.3.4"], &["foo"], &[])),
        ),
        ("options ", Some((&[], &[], &[]))),
        ("options ndots:5 attempts:2", Some((&[], &[], &["ndots:5", "attempts:2"]))),
        ("options ndots:1 ndots:5 attempts:2", Some((&[], &[], &["ndots:5", "attempts:2"]))),
        (
            "options ndots:1 edns0 attempts:2 single-request-reopen",
            Some((&[], &[], &["edns0", "attempts:2", "single-request-reopen", "ndots:1"])),
        ),
        ("options ndots:1\noptions ndots:5 attempts:3", Some((&[], &[], &["ndots:5", "attempts:3"]))),
        (
            "options ndots:1 timeout:3 timeout:1 attempts:3\noptions ndots:5",
            Some((&[], &[], &["ndots:5", "timeout:1", "attempts:3"])),
        ),
        (
            "options ndots:1 attempts:3\noptions ndots:1 attempts:3 ndots:5",
            Some((&[], &[], &["ndots:5", "attempts:3"])),
        ),
        (
            "nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar\noptions ndots:5 attempts:4",
            Some((&["1.2.3.4", "5.6.7.8"], &["bar"], &["ndots:5", "attempts:4"])),
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let got = parse_resolv_conf(text);
        match want {
            None => assert!(got.is_err(), "case {i} {text:?}: {got:?}"),
            Some((ns, search, opts)) => {
                let got = got.unwrap_or_else(|e| panic!("case {i} {text:?}: {e}"));
                assert_eq!(got.servers, strs(ns), "case {i} {text:?}");
                assert_eq!(got.searches, strs(search), "case {i} {text:?}");
                assert_eq!(set(&got.options), set(&strs(opts)), "case {i} {text:?}");
            }
        }
    }
}

fn a(n: usize) -> String {
    "A".repeat(n)
}

#[test]
fn search_paths_are_cut_to_the_resolvers_limits() {
    // 2,048 characters: 128 + 15 × 127 + 15 spaces.
    let mut fits: Vec<String> = vec![a(128)];
    fits.extend((0..15).map(|_| a(127)));
    assert_eq!(fits.join(" ").len(), 2048);
    let base = strs(&["testNS.svc.TEST", "svc.TEST", "TEST"]);
    let numbered: Vec<String> = base
        .iter()
        .cloned()
        .chain((4..=32).map(|i| i.to_string()))
        .collect();
    let with =
        |extra: &[String]| -> Vec<String> { numbered.iter().chain(extra).cloned().collect() };
    let cases: Vec<(Vec<String>, Vec<String>, bool)> = vec![
        (base.clone(), base.clone(), false),
        (
            strs(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
            strs(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
            false,
        ),
        (
            strs(&[
                "testNS.svc.TEST",
                "svc.TEST",
                "TEST",
                "AAA",
                &"B".repeat(256),
                "BBB",
            ]),
            strs(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
            true,
        ),
        (fits.clone(), fits.clone(), false),
        (
            fits.iter().cloned().chain([String::from("B")]).collect(),
            fits.clone(),
            true,
        ),
        (
            strs(&[
                "testNS.svc.TEST",
                "svc.TEST",
                "TEST",
                "AAA",
                "BBB",
                "CCC",
                "DDD",
            ]),
            strs(&[
                "testNS.svc.TEST",
                "svc.TEST",
                "TEST",
                "AAA",
                "BBB",
                "CCC",
                "DDD",
            ]),
            false,
        ),
        (numbered.clone(), numbered.clone(), false),
        (with(&strs(&["33"])), numbered.clone(), true),
    ];
    for (i, (input, want, warned)) in cases.into_iter().enumerate() {
        let (got, msg) = fit_searches(input);
        assert_eq!(got, want, "case {i}");
        assert_eq!(msg.is_some(), warned, "case {i}");
        if let Some(m) = msg {
            assert_eq!(
                m,
                format!(
                    "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                    want.join(" ")
                )
            );
        }
    }
}

#[test]
fn nameservers_are_cut_to_three() {
    let (got, msg) = fit_servers(strs(&["127.0.0.1"]));
    assert_eq!((got, msg), (strs(&["127.0.0.1"]), None));
    let three = strs(&["127.0.0.1", "10.0.0.10", "8.8.8.8"]);
    assert_eq!(fit_servers(three.clone()), (three.clone(), None));
    let (got, msg) = fit_servers(strs(&["127.0.0.1", "10.0.0.10", "8.8.8.8", "1.2.3.4"]));
    assert_eq!(got, three);
    assert_eq!(
        msg.as_deref(),
        Some("Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 127.0.0.1 10.0.0.10 8.8.8.8")
    );
}

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "test_pod", "namespace": "testNS", "uid": "u1"},
        "spec": spec,
    }))
    .unwrap()
}

fn option(name: &str, value: Option<&str>) -> serde_json::Value {
    match value {
        Some(v) => serde_json::json!({"name": name, "value": v}),
        None => serde_json::json!({"name": name}),
    }
}

#[test]
fn pod_options_override_the_bases_by_name() {
    // (the base's options, the pod's, the merged set)
    type Case<'a> = (
        &'a [&'a str],
        &'a [(&'a str, Option<&'a str>)],
        &'a [&'a str],
    );
    let cases: &[Case] = &[
        (&["ndots:5", "debug"], &[], &["ndots:5", "debug"]),
        (
            &["ndots:5", "debug"],
            &[("single-request", None), ("attempts", Some("3"))],
            &["ndots:5", "debug", "single-request", "attempts:3"],
        ),
        (
            &["ndots:5", "debug"],
            &[
                ("ndots", Some("3")),
                ("debug", None),
                ("single-request", None),
                ("attempts", Some("3")),
            ],
            &["ndots:3", "debug", "single-request", "attempts:3"],
        ),
    ];
    for (i, (existing, pod_opts, want)) in cases.iter().enumerate() {
        let cfg: PodDNSConfig = serde_json::from_value(serde_json::json!({
            "options": pod_opts.iter().map(|(n, v)| option(n, *v)).collect::<Vec<_>>(),
        }))
        .unwrap();
        let base = DnsConfig {
            options: strs(existing),
            ..Default::default()
        };
        assert_eq!(
            set(&merge(base, &cfg).options),
            set(&strs(want)),
            "case {i}"
        );
    }
}

#[test]
fn each_policy_starts_from_its_base() {
    // (dnsPolicy, hostNetwork, base)
    let cases = [
        ("ClusterFirst", false, Base::Cluster),
        ("ClusterFirstWithHostNet", true, Base::Cluster),
        ("ClusterFirstWithHostNet", false, Base::Cluster),
        ("Default", false, Base::Host),
        ("Default", true, Base::Host),
        ("ClusterFirst", true, Base::Host),
        ("None", false, Base::None),
    ];
    for (policy, host_net, want) in cases {
        let p = pod(
            serde_json::json!({"containers": [], "dnsPolicy": policy, "hostNetwork": host_net}),
        );
        assert_eq!(base(&p), want, "{policy} hostNetwork={host_net}");
    }
    // Unset is ClusterFirst.
    assert_eq!(
        base(&pod(serde_json::json!({"containers": []}))),
        Base::Cluster
    );
}

fn settings(resolv_conf: Option<&str>) -> Settings {
    Settings {
        cluster_dns: vec!["203.0.113.1".parse().unwrap()],
        cluster_domain: "kubernetes.io".into(),
        resolv_conf: resolv_conf.map(PathBuf::from),
        node_ips: vec![],
    }
}

#[test]
fn without_a_resolver_file_host_pods_get_a_local_resolver() {
    // Upstream's TestGetPodDNS: host-network pods, no resolver file.
    let s = settings(None);
    let host = DnsConfig::default();
    let run = |policy: &str| {
        let p =
            pod(serde_json::json!({"containers": [], "hostNetwork": true, "dnsPolicy": policy}));
        pod_dns(&s, host.clone(), &p).0
    };
    let with_host_net = run("ClusterFirstWithHostNet");
    assert_eq!(with_host_net.servers, strs(&["203.0.113.1"]));
    assert_eq!(with_host_net.searches[0], "testNS.svc.kubernetes.io");
    for policy in ["ClusterFirst", "Default"] {
        let c = run(policy);
        assert_eq!(c.servers, strs(&["127.0.0.1"]), "{policy}");
        assert_eq!(c.searches, strs(&["."]), "{policy}");
    }
    let on_v6 = Settings {
        node_ips: vec!["fd00::1".parse().unwrap()],
        ..s.clone()
    };
    let p = pod(serde_json::json!({"containers": [], "dnsPolicy": "Default"}));
    assert_eq!(pod_dns(&on_v6, host, &p).0.servers, strs(&["::1"]));
}

#[test]
fn dns_config_is_merged_into_every_policy() {
    // Upstream's TestGetPodDNSCustom: a host file with one nameserver and
    // one search domain; cluster DNS 10.0.0.10 in kubernetes.io.
    let s = Settings {
        cluster_dns: vec!["10.0.0.10".parse().unwrap()],
        cluster_domain: "kubernetes.io".into(),
        resolv_conf: Some(PathBuf::from("/etc/resolv.conf")),
        node_ips: vec![],
    };
    let host = parse_resolv_conf("nameserver 192.0.2.1\nsearch host.domain\n").unwrap();
    let custom = serde_json::json!({
        "nameservers": ["10.0.0.11"],
        "searches": ["my.domain"],
        "options": [{"name": "ndots", "value": "3"}, {"name": "debug"}],
    });
    let cluster_search = strs(&[
        "testNS.svc.kubernetes.io",
        "svc.kubernetes.io",
        "kubernetes.io",
        "host.domain",
        "my.domain",
    ]);
    // (policy, hostNetwork, dnsConfig, servers, searches, options)
    type Case = (
        &'static str,
        bool,
        Option<serde_json::Value>,
        Vec<String>,
        Vec<String>,
        Vec<String>,
    );
    let cases: Vec<Case> = vec![
        ("None", false, None, vec![], vec![], vec![]),
        (
            "None",
            false,
            Some(serde_json::json!({
                "nameservers": ["203.0.113.1"],
                "searches": ["my.domain", "second.domain"],
                "options": [{"name": "ndots", "value": "3"}, {"name": "debug"}],
            })),
            strs(&["203.0.113.1"]),
            strs(&["my.domain", "second.domain"]),
            strs(&["ndots:3", "debug"]),
        ),
        (
            "ClusterFirst",
            false,
            Some(custom.clone()),
            strs(&["10.0.0.10", "10.0.0.11"]),
            cluster_search.clone(),
            strs(&["ndots:3", "debug"]),
        ),
        (
            "ClusterFirstWithHostNet",
            true,
            Some(custom.clone()),
            strs(&["10.0.0.10", "10.0.0.11"]),
            cluster_search.clone(),
            strs(&["ndots:3", "debug"]),
        ),
        (
            "Default",
            false,
            Some(custom.clone()),
            strs(&["192.0.2.1", "10.0.0.11"]),
            strs(&["host.domain", "my.domain"]),
            strs(&["ndots:3", "debug"]),
        ),
    ];
    for (policy, host_net, cfg, servers, searches, options) in cases {
        let mut spec =
            serde_json::json!({"containers": [], "dnsPolicy": policy, "hostNetwork": host_net});
        if let Some(c) = cfg {
            spec["dnsConfig"] = c;
        }
        let (got, warnings) = pod_dns(&s, host.clone(), &pod(spec));
        assert_eq!(got.servers, servers, "{policy}");
        assert_eq!(got.searches, searches, "{policy}");
        assert_eq!(set(&got.options), set(&options), "{policy}");
        assert!(warnings.is_empty(), "{policy}: {warnings:?}");
    }
}

#[test]
fn cluster_first_without_cluster_dns_falls_back_to_the_host_with_a_warning() {
    let s = Settings {
        cluster_dns: vec![],
        ..settings(Some("/etc/resolv.conf"))
    };
    let host =
        parse_resolv_conf("nameserver 192.0.2.1\nsearch host.domain\noptions edns0\n").unwrap();
    let (got, warnings) = pod_dns(
        &s,
        host.clone(),
        &pod(serde_json::json!({"containers": []})),
    );
    assert_eq!(got, host);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].0, "MissingClusterDNS");
    assert_eq!(
        warnings[0].1,
        "pod: \"test_pod_testNS(u1)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
    );
    // The cluster path is ndots:5 with the cluster servers only.
    let (cluster, _) = pod_dns(
        &settings(Some("/x")),
        host,
        &pod(serde_json::json!({"containers": []})),
    );
    assert_eq!(cluster.servers, strs(&["203.0.113.1"]));
    assert_eq!(cluster.options, strs(&["ndots:5"]));
    assert_eq!(
        cluster.searches,
        strs(&[
            "testNS.svc.kubernetes.io",
            "svc.kubernetes.io",
            "kubernetes.io",
            "host.domain"
        ])
    );
}

#[test]
fn too_many_nameservers_from_dns_config_are_cut_with_a_warning() {
    let spec = serde_json::json!({
        "containers": [],
        "dnsConfig": {"nameservers": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]},
    });
    let (got, warnings) = pod_dns(&settings(None), DnsConfig::default(), &pod(spec));
    assert_eq!(got.servers, strs(&["203.0.113.1", "10.0.0.2", "10.0.0.3"]));
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].0, "DNSConfigForming");
}

#[test]
fn a_pods_domain_and_kernel_hostname() {
    let p =
        pod(serde_json::json!({"containers": [], "subdomain": "sub", "setHostnameAsFQDN": true}));
    assert_eq!(
        pod_domain(&p, "cluster.local"),
        "sub.testNS.svc.cluster.local"
    );
    assert_eq!(
        kernel_hostname(&p, "h", "sub.testNS.svc.cluster.local").unwrap(),
        "h.sub.testNS.svc.cluster.local"
    );
    let long = "x".repeat(40);
    let e = kernel_hostname(&p, &long, "sub.testNS.svc.cluster.local").unwrap_err();
    assert!(
        e.contains("is too long (64 characters is the max, 69 characters requested)"),
        "{e}"
    );
    let plain = pod(serde_json::json!({"containers": [], "subdomain": "sub"}));
    assert_eq!(
        kernel_hostname(&plain, "h", "sub.testNS.svc.cluster.local").unwrap(),
        "h"
    );
    let overridden =
        pod(serde_json::json!({"containers": [], "subdomain": "sub", "hostnameOverride": "o"}));
    assert_eq!(pod_domain(&overridden, "cluster.local"), "");
    assert_eq!(
        pod_domain(&pod(serde_json::json!({"containers": []})), "cluster.local"),
        ""
    );
}
