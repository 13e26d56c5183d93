//! `/configz`: the running configuration, as upstream serves it
//! (`{"kubeletconfig": KubeletConfiguration}` in v1beta1 field names):
//! the fields rkube acts on, with the values in force (defaults
//! applied). Fields rkube does not honour are not shown (a reader must not
//! take them for settings in effect).

use serde_json::{json, Value};

use crate::config::{KubeletConfiguration, VerifyPolicy};
use rkube_util::duration::format as go_duration;

fn policy(p: VerifyPolicy) -> &'static str {
    match p {
        VerifyPolicy::NeverVerify => "NeverVerify",
        VerifyPolicy::NeverVerifyPreloadedImages => "NeverVerifyPreloadedImages",
        VerifyPolicy::AlwaysVerify => "AlwaysVerify",
    }
}

/// The `/configz` document of `c`.
pub fn document(c: &KubeletConfiguration) -> Value {
    let mut cfg = json!({
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "address": c.address,
        "port": c.port,
        "healthzPort": c.healthz_port,
        "healthzBindAddress": c.healthz_bind_address,
        "nodeStatusUpdateFrequency": go_duration(c.node_status_update_frequency),
        "nodeStatusReportFrequency": go_duration(c.node_status_report_frequency),
        "nodeLeaseDurationSeconds": c.node_lease_duration_seconds,
        "maxPods": c.max_pods,
        "podsPerCore": c.pods_per_core,
        "evictionHard": c.eviction_hard,
        "evictionPressureTransitionPeriod": go_duration(c.eviction_pressure_transition_period),
        "serializeImagePulls": c.serialize_image_pulls,
        "registerNode": c.register_node,
        "containerRuntimeEndpoint": c.container_runtime_endpoint,
        "imagePullCredentialsVerificationPolicy": policy(c.image_pull_credentials_verification_policy),
        "nodeStatusMaxImages": c.node_status_max_images,
        "resolvConf": c.resolv_conf,
        "imageMinimumGCAge": go_duration(c.image_minimum_gc_age),
        "imageMaximumGCAge": go_duration(c.image_maximum_gc_age),
        "imageGCHighThresholdPercent": c.image_gc_high_threshold_percent,
        "imageGCLowThresholdPercent": c.image_gc_low_threshold_percent,
        "failSwapOn": c.fail_swap_on,
        "failCgroupV1": c.fail_cgroup_v1,
        "containerLogMaxSize": rkube_model::quantity::format_bytes(c.container_log_max_size),
        "containerLogMaxFiles": c.container_log_max_files,
        "containerLogMaxWorkers": c.container_log_max_workers,
        "containerLogMonitorInterval": go_duration(c.container_log_monitor_interval),
        "rotateCertificates": c.rotate_certificates,
        "serverTLSBootstrap": c.server_tls_bootstrap,
        "evictionMaxPodGracePeriod": c.eviction_max_pod_grace_period,
        "cgroupDriver": c.cgroup_driver,
        "cgroupRoot": c.cgroup_root,
        "cgroupsPerQOS": true,
        "enforceNodeAllocatable": c.enforce_node_allocatable,
        "shutdownGracePeriod": go_duration(c.shutdown_grace_period),
        "shutdownGracePeriodCriticalPods": go_duration(c.shutdown_grace_period_critical_pods),
        "logging": {"format": "text", "verbosity": c.logging_verbosity},
    });
    // (A second object: one json! of every field is past the macro's
    // recursion limit.)
    let rates = json!({
        "kubeAPIQPS": c.kube_api_qps,
        "kubeAPIBurst": c.kube_api_burst,
        "eventRecordQPS": c.event_record_qps,
        "eventBurst": c.event_burst,
        "registryPullQPS": c.registry_pull_qps,
        "registryBurst": c.registry_burst,
        "podLogsDir": c.pod_logs_dir,
        "volumeStatsAggPeriod": go_duration(c.volume_stats_agg_period),
        "syncFrequency": go_duration(c.sync_frequency),
    });
    if let (Some(o), Some(r)) = (cfg.as_object_mut(), rates.as_object()) {
        o.extend(r.clone());
    }
    let obj = cfg.as_object_mut();
    if let Some(o) = obj {
        let mut opt = |k: &str, v: Value, present: bool| {
            if present {
                o.insert(k.to_string(), v);
            }
        };
        opt(
            "staticPodPath",
            json!(c.static_pod_path),
            !c.static_pod_path.is_empty(),
        );
        opt(
            "registerWithTaints",
            json!(c.register_with_taints),
            !c.register_with_taints.is_empty(),
        );
        opt(
            "systemReserved",
            json!(c.system_reserved),
            !c.system_reserved.is_empty(),
        );
        opt(
            "kubeReserved",
            json!(c.kube_reserved),
            !c.kube_reserved.is_empty(),
        );
        opt("podCIDR", json!(c.pod_cidr), !c.pod_cidr.is_empty());
        opt(
            "providerID",
            json!(c.provider_id),
            !c.provider_id.is_empty(),
        );
        opt(
            "clusterDNS",
            json!(c
                .cluster_dns
                .iter()
                .map(|ip| ip.to_string())
                .collect::<Vec<_>>()),
            !c.cluster_dns.is_empty(),
        );
        opt(
            "memorySwap",
            json!({"swapBehavior": c.memory_swap_behavior}),
            !c.memory_swap_behavior.is_empty(),
        );
        opt(
            "evictionSoft",
            json!(c.eviction_soft),
            !c.eviction_soft.is_empty(),
        );
        opt(
            "evictionSoftGracePeriod",
            json!(c.eviction_soft_grace_period),
            !c.eviction_soft_grace_period.is_empty(),
        );
        opt(
            "evictionMinimumReclaim",
            json!(c.eviction_minimum_reclaim),
            !c.eviction_minimum_reclaim.is_empty(),
        );
        let gates = c.feature_gates.set();
        opt("featureGates", json!(gates), !gates.is_empty());
        opt(
            "clusterDomain",
            json!(c.cluster_domain),
            !c.cluster_domain.is_empty(),
        );
    }
    json!({ "kubeletconfig": cfg })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_in_upstreams_field_names() {
        let d = document(&KubeletConfiguration::default());
        let k = &d["kubeletconfig"];
        assert_eq!(k["kind"], "KubeletConfiguration");
        assert_eq!(k["port"], 10250);
        assert_eq!(k["nodeStatusReportFrequency"], "5m0s");
        assert_eq!(k["nodeStatusUpdateFrequency"], "10s");
        assert_eq!(k["syncFrequency"], "1m0s");
        assert_eq!(k["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(k["containerLogMaxSize"], "10Mi");
        assert_eq!(k["imageMinimumGCAge"], "2m0s");
        assert_eq!(k["imageGCHighThresholdPercent"], 85);
        assert_eq!(k["failSwapOn"], true);
        assert_eq!(k["cgroupRoot"], "/");
        assert_eq!(k["enforceNodeAllocatable"], json!(["pods"]));
        assert_eq!(k["logging"]["verbosity"], 0);
        assert_eq!(k["kubeAPIQPS"], 50);
        assert_eq!(k["registryBurst"], 10);
        assert!(k.get("featureGates").is_none(), "only gates set are shown");
        assert_eq!(
            k["imagePullCredentialsVerificationPolicy"],
            "NeverVerifyPreloadedImages"
        );
        assert!(k.get("clusterDNS").is_none(), "unset fields are not shown");
        let c = KubeletConfiguration {
            cluster_dns: vec!["10.96.0.10".parse().unwrap()],
            cluster_domain: "cluster.local".into(),
            ..Default::default()
        };
        let k = &document(&c)["kubeletconfig"];
        assert_eq!(k["clusterDNS"], json!(["10.96.0.10"]));
        assert_eq!(k["clusterDomain"], "cluster.local");
    }
}
