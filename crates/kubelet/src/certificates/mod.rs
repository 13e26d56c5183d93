//! The kubelet's certificates, as upstream's `pkg/kubelet/certificate`
//! and client-go's `util/certificate`: TLS bootstrap with a bootstrap
//! token (`--bootstrap-kubeconfig`, [`bootstrap`]) — a key made on the
//! node, a `kubernetes.io/kube-apiserver-client-kubelet` CertificateSigningRequest
//! for `system:node:<name>` ([`csr`]), the issued certificate kept as
//! upstream's file store keeps it ([`store`]: `<cert-dir>/kubelet-client-<time>.pem`
//! with the `kubelet-client-current.pem` link) and a kubeconfig at
//! `--kubeconfig` that points to it; with `rotateCertificates`, the
//! certificate renewed before it expires ([`rotation`]).

pub mod bootstrap;
pub mod csr;
pub mod rotation;
pub mod store;
