//! Pod volumes on the node, as upstream's volume manager and its plugins
//! (`pkg/volume/{configmap,secret,downwardapi,projected,emptydir}`):
//!
//! * [`payload`]: what a ConfigMap, Secret, downwardAPI or projected volume
//!   holds (pure: objects in, files out), with upstream's errors;
//! * [`atomic_writer`]: writes such a payload so a container never sees a
//!   half-updated volume (the `..data` symlink swap);
//! * [`subpath`]: `subPath` resolved beneath the volume root without
//!   following symlinks, bind-mounted for the runtime;
//! * [`empty_dir`]: tmpfs for `medium: Memory`;
//! * [`host_path`]: `hostPath` types checked (and made) as upstream;
//! * [`persistent`]: PersistentVolumeClaim (and generic ephemeral) volumes
//!   resolved to the PersistentVolume they are bound to (pure);
//! * [`local`]: local PersistentVolumes bind-mounted under the pod;
//! * [`csi`]: CSI drivers registered on the node, their PersistentVolumes
//!   staged and published;
//! * [`ownership`]: a volume given to the pod's `fsGroup`;
//! * [`manager`]: fetches what a pod's volumes and environment reference
//!   (ConfigMaps, Secrets, ServiceAccount tokens through the TokenRequest
//!   API, rotated before they expire) and keeps each volume up to date.

pub mod atomic_writer;
pub mod csi;
pub mod empty_dir;
pub mod host_path;
pub mod local;
pub mod manager;
pub mod ownership;
pub mod payload;
pub mod pem;
pub mod persistent;
pub mod pod_certificate;
pub mod pod_key;
pub mod subpath;
pub mod trust_bundle;
