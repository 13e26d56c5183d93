//! systemd's readiness notification (`sd_notify(3)`): one datagram to
//! `$NOTIFY_SOCKET`, a path or an abstract socket (`@name`). Without the
//! variable (not started by a `Type=notify` unit) it does nothing.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (`READY=1`, ...) to `$NOTIFY_SOCKET`; `Ok(false)` when
/// the variable is unset.
pub fn notify(state: &str) -> io::Result<bool> {
    match std::env::var_os("NOTIFY_SOCKET") {
        Some(path) => notify_to(&path.to_string_lossy(), state).map(|()| true),
        None => Ok(false),
    }
}

fn notify_to(socket: &str, state: &str) -> io::Result<()> {
    let addr = match socket.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(socket)?,
    };
    UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_and_an_abstract_socket() {
        let dir = std::env::temp_dir().join(format!("rkube-sdnotify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        notify_to(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        let name = format!("rkube-sdnotify-{}", std::process::id());
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        notify_to(&format!("@{name}"), "READY=1").unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        assert!(notify_to(dir.join("absent.sock").to_str().unwrap(), "READY=1").is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
