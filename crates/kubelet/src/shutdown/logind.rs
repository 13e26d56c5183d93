//! systemd-logind over the system bus, as upstream's
//! `pkg/kubelet/nodeshutdown/systemd`: the `InhibitDelayMaxUSec` logind
//! allows, the `delay` inhibitor lock on `shutdown` (a file descriptor:
//! closing it releases the lock), the `PrepareForShutdown` signal, and the
//! drop-in that raises the delay with logind's reload. The bus is the one
//! `DBUS_SYSTEM_BUS_ADDRESS` names, else `/run/dbus/system_bus_socket`.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use zbus::zvariant::OwnedFd;

const LOGIND: &str = "org.freedesktop.login1";
const LOGIND_PATH: &str = "/org/freedesktop/login1";
const LOGIND_MANAGER: &str = "org.freedesktop.login1.Manager";

/// Where upstream writes its logind drop-in.
pub const LOGIND_CONF_DIR: &str = "/etc/systemd/logind.conf.d";
/// Its name there.
pub const KUBELET_LOGIND_CONF: &str = "99-kubelet.conf";

/// A connection to the system bus.
pub struct Logind {
    conn: zbus::Connection,
}

/// What went wrong with logind, in upstream's words where it has them.
#[derive(Debug, thiserror::Error)]
pub enum LogindError {
    /// No system bus (no D-Bus daemon, no logind).
    #[error("connecting to the system bus (is systemd-logind running?): {0}")]
    Connect(zbus::Error),
    /// Reading `InhibitDelayMaxUSec`.
    #[error("failed reading InhibitDelayMaxUSec property from logind: {0}")]
    Delay(zbus::Error),
    /// Taking the inhibitor lock.
    #[error("failed creating systemd inhibitor: {0}")]
    Inhibit(zbus::Error),
    /// Subscribing to `PrepareForShutdown`.
    #[error("failed to monitor shutdown: {0}")]
    Monitor(zbus::Error),
    /// Writing the drop-in.
    #[error("failed writing logind shutdown inhibit override file {path}: {source}")]
    Override {
        /// The drop-in.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Asking systemd to reload logind.
    #[error("unable to reload logind conf: {0}")]
    Reload(zbus::Error),
}

impl Logind {
    /// Connects to the system bus.
    pub async fn connect() -> Result<Logind, LogindError> {
        let conn = zbus::Connection::system()
            .await
            .map_err(LogindError::Connect)?;
        Ok(Logind { conn })
    }

    async fn manager(&self) -> zbus::Result<zbus::Proxy<'static>> {
        zbus::proxy::Builder::new(&self.conn)
            .destination(LOGIND)?
            .path(LOGIND_PATH)?
            .interface(LOGIND_MANAGER)?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
    }

    /// logind's `InhibitDelayMaxUSec`: the longest a delay lock may hold a
    /// shutdown back.
    pub async fn inhibit_delay(&self) -> Result<Duration, LogindError> {
        let m = self.manager().await.map_err(LogindError::Delay)?;
        let us: u64 = m
            .get_property("InhibitDelayMaxUSec")
            .await
            .map_err(LogindError::Delay)?;
        Ok(Duration::from_micros(us))
    }

    /// Takes the `delay` lock on `shutdown`: held while the returned
    /// descriptor is open.
    pub async fn inhibit_shutdown(&self) -> Result<OwnedFd, LogindError> {
        let m = self.manager().await.map_err(LogindError::Inhibit)?;
        m.call(
            "Inhibit",
            &(
                "shutdown",
                "kubelet",
                "Kubelet needs time to handle node shutdown",
                "delay",
            ),
        )
        .await
        .map_err(LogindError::Inhibit)
    }

    /// `PrepareForShutdown` signals from anyone on the bus (upstream's
    /// match rule names no sender): `true` when a shutdown starts, `false`
    /// when it is cancelled. Ends when the connection does.
    pub async fn prepare_for_shutdown(
        &self,
    ) -> Result<impl futures::Stream<Item = bool> + Send + 'static, LogindError> {
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .interface(LOGIND_MANAGER)
            .and_then(|b| b.member("PrepareForShutdown"))
            .and_then(|b| b.path(LOGIND_PATH))
            .map_err(LogindError::Monitor)?
            .build();
        let stream = zbus::MessageStream::for_match_rule(rule, &self.conn, Some(16))
            .await
            .map_err(LogindError::Monitor)?;
        Ok(stream.filter_map(|m| async move {
            let m = m.ok()?;
            match m.body().deserialize::<bool>() {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::error!(error = %e, "Failed obtaining shutdown event, PrepareForShutdown event was not bool type as expected");
                    None
                }
            }
        }))
    }

    /// Asks systemd to reload logind's configuration (SIGHUP to
    /// `systemd-logind.service`).
    pub async fn reload_logind_conf(&self) -> Result<(), LogindError> {
        let systemd = zbus::proxy::Builder::<zbus::Proxy<'static>>::new(&self.conn)
            .destination("org.freedesktop.systemd1")
            .and_then(|b| b.path("/org/freedesktop/systemd1"))
            .and_then(|b| b.interface("org.freedesktop.systemd1.Manager"))
            .map_err(LogindError::Reload)?
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(LogindError::Reload)?;
        systemd
            .call::<_, _, ()>("KillUnit", &("systemd-logind.service", "all", 1i32))
            .await
            .map_err(LogindError::Reload)
    }
}

/// The drop-in upstream writes to raise logind's delay to `delay`.
pub fn override_text(delay: Duration) -> String {
    format!(
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={}\n",
        delay.as_secs_f64().round()
    )
}

/// Writes [`override_text`] to `dir/99-kubelet.conf` (mode 0644, as
/// upstream).
pub fn write_override(dir: &Path, delay: Duration) -> Result<(), LogindError> {
    let path = dir.join(KUBELET_LOGIND_CONF);
    let fail = |source| LogindError::Override {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    std::fs::write(&path, override_text(delay)).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drop_in_as_upstream_writes_it() {
        assert_eq!(
            override_text(Duration::from_secs(30)),
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
        );
        let dir = std::env::temp_dir().join(format!("rkube-logind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_override(&dir, Duration::from_millis(90_400)).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(KUBELET_LOGIND_CONF)).unwrap(),
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=90\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
