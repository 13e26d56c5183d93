//! `clusterTrustBundle` projections (upstream's
//! `pkg/kubelet/clustertrustbundle` and the projected volume's source): the
//! cluster's ClusterTrustBundles (`certificates.k8s.io/v1`) come from one
//! watch of them all, started by the first pod that projects one and
//! shared by every pod after it (as upstream's informer); a projection
//! takes one bundle by `name`, or every bundle of `signerName` whose labels
//! match `labelSelector` (none when the selector is unset, all when it is
//! empty). Its file holds the bundles' certificates, each once, as PEM
//! `CERTIFICATE` blocks in a stable order (upstream shuffles them once per
//! kubelet start; rkube sorts them).

use std::sync::Arc;

use k8s_openapi::api::certificates::v1::ClusterTrustBundle;
use k8s_openapi::api::core::v1::ClusterTrustBundleProjection;

use super::pem;
use crate::informer::Informer;

/// The longest label selector accepted (upstream's
/// `maxLabelSelectorLength`).
const MAX_SELECTOR_LEN: usize = 100 * 1024;

/// The cluster's ClusterTrustBundles, watched from first use.
pub type TrustBundles = Informer<ClusterTrustBundle>;

/// The informer's error before its first list (upstream's words).
pub const NOT_SYNCED: &str = "ClusterTrustBundle informer has not yet synced";

/// The trust anchors projection `p` selects from `bundles`, as one PEM
/// file; an `optional` projection that selects nothing is an empty file.
pub fn anchors(
    bundles: &[Arc<ClusterTrustBundle>],
    p: &ClusterTrustBundleProjection,
) -> Result<Vec<u8>, String> {
    let optional = p.optional == Some(true);
    let chosen: Vec<&ClusterTrustBundle> = if let Some(name) = &p.name {
        match bundles.iter().find(|b| b.metadata.name.as_deref() == Some(name)) {
            Some(b) => vec![b],
            None if optional => return Ok(Vec::new()),
            None => {
                return Err(format!(
                    "while getting ClusterTrustBundle: clustertrustbundles.certificates.k8s.io {name:?} not found"
                ))
            }
        }
    } else if let Some(signer) = &p.signer_name {
        let selector = match &p.label_selector {
            // Unset: matches nothing.
            None => None,
            Some(s) => {
                let sel = rkube_model::convert::label_selector(s, "labelSelector")
                    .map_err(|e| format!("while parsing label selector: {e}"))?;
                let len = serde_json::to_string(s).map_or(0, |j| j.len());
                if len > MAX_SELECTOR_LEN {
                    return Err(format!(
                        "label selector length ({len}) is larger than {MAX_SELECTOR_LEN}"
                    ));
                }
                Some(sel)
            }
        };
        let matching: Vec<&ClusterTrustBundle> = match &selector {
            None => Vec::new(),
            Some(sel) => bundles
                .iter()
                .map(|b| b.as_ref())
                .filter(|b| &b.spec.signer_name.clone().unwrap_or_default() == signer)
                .filter(|b| sel.matches(&b.metadata.labels.clone().unwrap_or_default()))
                .collect(),
        };
        if matching.is_empty() {
            if optional {
                return Ok(Vec::new());
            }
            return Err(
                "combination of signerName and labelSelector matched zero ClusterTrustBundles"
                    .into(),
            );
        }
        matching
    } else {
        return Err(
            "ClusterTrustBundle projection requires either name or signerName to be set".into(),
        );
    };
    let mut ders: Vec<Vec<u8>> = chosen
        .iter()
        .flat_map(|b| pem::blocks(&b.spec.trust_bundle))
        .collect();
    ders.sort();
    ders.dedup();
    Ok(ders
        .iter()
        .flat_map(|d| pem::encode("CERTIFICATE", d))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::ClusterTrustBundleSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn pem_certificate(der: &[u8]) -> Vec<u8> {
        pem::encode("CERTIFICATE", der)
    }

    fn pem(der: &[u8]) -> String {
        String::from_utf8(pem_certificate(der)).unwrap()
    }

    fn bundle(
        name: &str,
        signer: Option<&str>,
        labels: &[(&str, &str)],
        ders: &[&[u8]],
    ) -> Arc<ClusterTrustBundle> {
        let mut b = ClusterTrustBundle {
            spec: ClusterTrustBundleSpec {
                signer_name: signer.map(str::to_string),
                trust_bundle: ders.iter().map(|d| pem(d)).collect(),
            },
            ..Default::default()
        };
        b.metadata.name = Some(name.into());
        b.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        Arc::new(b)
    }

    fn by_signer(
        signer: &str,
        selector: Option<LabelSelector>,
        optional: bool,
    ) -> ClusterTrustBundleProjection {
        ClusterTrustBundleProjection {
            signer_name: Some(signer.into()),
            label_selector: selector,
            optional: Some(optional),
            path: "ca.pem".into(),
            ..Default::default()
        }
    }

    #[test]
    fn projections_select_dedupe_and_sort() {
        let all = vec![
            bundle(
                "a",
                Some("x.io/s"),
                &[("team", "a")],
                &[b"\x02two", b"\x01one"],
            ),
            bundle("b", Some("x.io/s"), &[("team", "b")], &[b"\x01one"]),
            bundle("c", Some("y.io/s"), &[("team", "a")], &[b"\x03three"]),
            bundle("plain", None, &[], &[b"\x04four"]),
        ];
        let by_name = ClusterTrustBundleProjection {
            name: Some("plain".into()),
            path: "ca.pem".into(),
            ..Default::default()
        };
        assert_eq!(
            anchors(&all, &by_name).unwrap(),
            pem_certificate(b"\x04four")
        );
        // Empty selector: every bundle of the signer, each certificate once.
        let every = anchors(
            &all,
            &by_signer("x.io/s", Some(LabelSelector::default()), false),
        )
        .unwrap();
        let want: Vec<u8> = [pem_certificate(b"\x01one"), pem_certificate(b"\x02two")].concat();
        assert_eq!(every, want);
        // Unset selector: nothing (an error unless optional).
        let e = anchors(&all, &by_signer("x.io/s", None, false)).unwrap_err();
        assert_eq!(
            e,
            "combination of signerName and labelSelector matched zero ClusterTrustBundles"
        );
        assert_eq!(
            anchors(&all, &by_signer("x.io/s", None, true)).unwrap(),
            Vec::<u8>::new()
        );
        let team_b = LabelSelector {
            match_labels: Some([("team".to_string(), "b".to_string())].into()),
            ..Default::default()
        };
        assert_eq!(
            anchors(&all, &by_signer("x.io/s", Some(team_b), false)).unwrap(),
            pem_certificate(b"\x01one")
        );
        let missing = ClusterTrustBundleProjection {
            name: Some("nope".into()),
            path: "ca.pem".into(),
            ..Default::default()
        };
        assert!(anchors(&all, &missing).unwrap_err().contains("not found"));
        let optional = ClusterTrustBundleProjection {
            optional: Some(true),
            ..missing
        };
        assert!(anchors(&all, &optional).unwrap().is_empty());
    }
}
