//! The Unix sockets the kubelet serves gRPC on (upstream's `CreateListener`
//! of `k8s.io/cri-client/pkg/util`): the pod-resources API and the device
//! plugins' registration.
//!
//! The directory is created `0750` if missing, a stale socket (or any file)
//! at the path is unlinked, and the new socket is bound under a temporary
//! name and renamed into place, so a client never sees a half-made one (a
//! watcher sees it created whole). Its mode is what `bind` gives without
//! group and world write bits (upstream leaves it to the umask: `0755`
//! under the usual `022`); only its owner (root) can connect.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

/// Listens on `socket`, as above.
pub fn listen(socket: &Path) -> io::Result<UnixListener> {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("unlinking it: {e}"))),
    }
    let dir = match socket.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = socket
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    let placed = (|| {
        let mode = std::fs::metadata(&tmp)?.permissions().mode() & 0o777 & !0o022;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, socket)
    })();
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}
