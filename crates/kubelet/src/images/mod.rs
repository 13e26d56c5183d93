//! Images: pulling them with the pod's credentials ([`credentials`]), the
//! records of who pulled what ([`pull_records`], upstream's
//! `KubeletEnsureSecretPulledImages`) and the node's image list
//! (`status.images`, [`list`]). Image garbage collection lands
//! here too (upstream's `pkg/kubelet/images`).

pub mod credentials;
pub mod list;
pub mod pull_records;
pub mod puller;
