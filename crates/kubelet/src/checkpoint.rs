//! What upstream's checkpoint manager (`pkg/kubelet/checkpointmanager`)
//! refuses in a file the kubelet kept: the allocation and device manager
//! checkpoints read theirs through it.

/// Why a checkpoint file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// Not upstream's JSON shape.
    #[error("not a checkpoint: {0}")]
    Malformed(String),
    /// The checksum does not match the data (upstream's words).
    #[error("checkpoint is corrupted (checksum {expected} recorded, {actual} computed)")]
    Corrupt {
        /// The file's checksum.
        expected: u64,
        /// The data's.
        actual: u64,
    },
}
