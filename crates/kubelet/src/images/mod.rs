//! Images: pulling them with the pod's credentials ([`credentials`]) and
//! the records of who pulled what ([`pull_records`], upstream's
//! `KubeletEnsureSecretPulledImages`). Image garbage collection lands
//! here too (upstream's `pkg/kubelet/images`).

pub mod credentials;
pub mod pull_records;
pub mod puller;
