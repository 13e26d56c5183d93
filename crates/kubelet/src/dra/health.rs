//! Device health from the drivers (upstream's `healthinfo.go`, the
//! `ResourceHealthStatus` gate, beta and on in v1.37): a driver that
//! serves `v1.DRAResourceHealth` streams its devices' health
//! (`NodeWatchResources`); the kubelet keeps the latest report of each
//! device and reports it in the `allocatedResourcesStatus` of the
//! containers using it. A device not reported again within its timeout
//! (30 s unless the driver says) is `Unknown`; when the stream ends the
//! driver's devices are forgotten. The reports are kept in
//! `dra_health_state` (upstream's file: JSON of the reports by driver and
//! `pool/device`), read back at start; a file that cannot be read is
//! logged and the kubelet starts without it, as upstream's.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// The file's name in the root directory.
pub const FILE: &str = "dra_health_state";

/// The largest file read.
const MAX_BYTES: u64 = 16 << 20;

/// The health service the kubelet speaks.
pub const SERVICE: &str = "v1.DRAResourceHealth";

/// How long a report holds without a driver-given timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Upstream's cap on the devices kept per driver.
pub const MAX_DEVICES_PER_DRIVER: usize = 16384;

/// Upstream's `ResourceHealthMessageMaxLength`.
pub const MAX_MESSAGE: usize = 1024;

/// A device's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// `Healthy`.
    Healthy,
    /// `Unhealthy`.
    Unhealthy,
    /// `Unknown` (not reported, or its report too old).
    Unknown,
}

impl Health {
    /// The API's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Unhealthy => "Unhealthy",
            Health::Unknown => "Unknown",
        }
    }

    /// From the protocol's enum.
    pub fn from_proto(v: i32) -> Health {
        match v {
            1 => Health::Healthy,
            2 => Health::Unhealthy,
            _ => Health::Unknown,
        }
    }
}

/// One device's latest report.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Its health.
    pub health: Health,
    /// The driver's message (at most [`MAX_MESSAGE`] bytes).
    pub message: String,
    /// How long it holds.
    pub timeout: Duration,
    /// When it came.
    pub at: Timestamp,
}

fn elapsed(now: Timestamp, at: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(at)).unwrap_or_default()
}

/// One device's report in the file (upstream's `state.DeviceHealth`).
#[derive(Serialize, Deserialize)]
struct FileDevice {
    #[serde(rename = "PoolName", default)]
    pool_name: String,
    #[serde(rename = "DeviceName", default)]
    device_name: String,
    #[serde(rename = "Health", default)]
    health: String,
    #[serde(rename = "LastUpdated")]
    last_updated: Timestamp,
    /// Nanoseconds (Go's `time.Duration`).
    #[serde(rename = "HealthCheckTimeout", default)]
    timeout_ns: i64,
    #[serde(rename = "Message", default)]
    message: String,
}

#[derive(Serialize, Deserialize, Default)]
struct FileDriver {
    #[serde(rename = "Devices", default)]
    devices: BTreeMap<String, FileDevice>,
}

fn from_file(v: FileDevice) -> Report {
    let health = match v.health.as_str() {
        "Healthy" => Health::Healthy,
        "Unhealthy" => Health::Unhealthy,
        _ => Health::Unknown,
    };
    let timeout = match v.timeout_ns {
        n if n > 0 => Duration::from_nanos(n as u64),
        _ => DEFAULT_TIMEOUT,
    };
    Report {
        health,
        message: truncate(&v.message),
        timeout,
        at: v.last_updated,
    }
}

fn to_file(key: &str, r: &Report) -> FileDevice {
    let (pool, device) = key.split_once('/').unwrap_or((key, ""));
    FileDevice {
        pool_name: pool.to_string(),
        device_name: device.to_string(),
        health: r.health.as_str().to_string(),
        last_updated: r.at,
        timeout_ns: i64::try_from(r.timeout.as_nanos()).unwrap_or(i64::MAX),
        message: r.message.clone(),
    }
}

/// `message` cut to [`MAX_MESSAGE`] bytes with `...`, as upstream.
pub fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The devices' latest reports, by driver and `pool/device`.
#[derive(Debug, Default)]
pub struct HealthCache {
    drivers: Mutex<HashMap<String, HashMap<String, Report>>>,
    /// Where they are kept (`None`: in memory only).
    path: Option<PathBuf>,
}

type Drivers = HashMap<String, HashMap<String, Report>>;

impl HealthCache {
    /// The reports of `<root_dir>/dra_health_state`.
    pub fn open(root_dir: &std::path::Path) -> HealthCache {
        let path = root_dir.join(FILE);
        let mut drivers = Drivers::new();
        let read = rkube_util::file::read_text(&path, MAX_BYTES).and_then(|text| {
            serde_json::from_str::<BTreeMap<String, FileDriver>>(&text)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        });
        match read {
            Ok(file) => {
                for (driver, d) in file {
                    let devices = d
                        .devices
                        .into_iter()
                        .map(|(k, v)| (k, from_file(v)))
                        .collect();
                    drivers.insert(driver, devices);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "Failed to load health checkpoint, proceeding with empty cache")
            }
        }
        HealthCache {
            drivers: Mutex::new(drivers),
            path: Some(path),
        }
    }

    /// Writes the reports (a failure is logged: a restart would lose them).
    fn save(&self, all: &Drivers) {
        let Some(path) = &self.path else {
            return;
        };
        let file: BTreeMap<&str, FileDriver> = all
            .iter()
            .map(|(driver, devices)| {
                let devices = devices
                    .iter()
                    .map(|(k, r)| (k.clone(), to_file(k, r)))
                    .collect();
                (driver.as_str(), FileDriver { devices })
            })
            .collect();
        let bytes = rkube_util::go_json::marshal(&file).into_bytes();
        if let Err(e) = rkube_util::file::replace_private(path, &bytes) {
            tracing::error!(path = %path.display(), error = %e, "Failed to save health checkpoint after update. Kubelet restart may lose the device health information.");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Drivers> {
        self.drivers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The health of a device now: its report while it holds, else
    /// `Unknown` with no message.
    pub fn get(&self, driver: &str, pool: &str, device: &str, now: Timestamp) -> (Health, String) {
        let d = self.lock();
        match d
            .get(driver)
            .and_then(|m| m.get(&format!("{pool}/{device}")))
        {
            Some(r) if elapsed(now, r.at) <= r.timeout => (r.health, r.message.clone()),
            _ => (Health::Unknown, String::new()),
        }
    }

    /// Records a report of `driver` (`(pool, device, health, message,
    /// timeout)` each); devices it no longer reports are dropped once their
    /// report is too old. Whether anything changed.
    pub fn update(
        &self,
        driver: &str,
        devices: Vec<(String, String, Health, String, Duration)>,
        now: Timestamp,
    ) -> bool {
        let mut all = self.lock();
        let current = all.entry(driver.to_string()).or_default();
        let mut changed = false;
        let mut reported = std::collections::HashSet::new();
        for (pool, device, health, message, timeout) in devices {
            let key = format!("{pool}/{device}");
            reported.insert(key.clone());
            let old = current.get(&key);
            if old.is_none() && current.len() >= MAX_DEVICES_PER_DRIVER {
                continue;
            }
            if old
                .is_none_or(|o| o.health != health || o.message != message || o.timeout != timeout)
            {
                changed = true;
            }
            current.insert(
                key,
                Report {
                    health,
                    message,
                    timeout,
                    at: now,
                },
            );
        }
        let before = current.len();
        current.retain(|k, r| {
            let keep = reported.contains(k) || elapsed(now, r.at) <= r.timeout;
            if !keep && r.health != Health::Unknown {
                changed = true;
            }
            keep
        });
        let dropped = current.len() != before;
        if changed || dropped {
            self.save(&all);
        }
        changed
    }

    /// Forgets `driver`'s devices (its stream ended).
    pub fn clear(&self, driver: &str) {
        let mut all = self.lock();
        all.remove(driver);
        self.save(&all);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    #[test]
    fn reports_hold_for_their_timeout_then_are_unknown() {
        let dir = std::env::temp_dir().join(format!("rk-drahealth-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let c = HealthCache::open(&dir);
        let t0 = Timestamp::now();
        let dev = |h: Health, m: &str, t: u64| {
            vec![(
                "p".to_string(),
                "d".to_string(),
                h,
                m.to_string(),
                Duration::from_secs(t),
            )]
        };
        assert!(c.update("drv", dev(Health::Healthy, "ok", 30), t0));
        assert_eq!(c.get("drv", "p", "d", t0), (Health::Healthy, "ok".into()));
        // The same report again is no change; a new message is.
        assert!(!c.update("drv", dev(Health::Healthy, "ok", 30), t0));
        assert!(c.update("drv", dev(Health::Unhealthy, "ECC", 30), t0));
        // A restarted kubelet reads the report back.
        let again = HealthCache::open(&dir);
        assert_eq!(
            again.get("drv", "p", "d", t0),
            (Health::Unhealthy, "ECC".into())
        );
        let text = std::fs::read_to_string(dir.join(FILE)).unwrap();
        assert!(
            text.contains(r#""HealthCheckTimeout":30000000000"#),
            "{text}"
        );
        assert_eq!(
            c.get("drv", "p", "d", t0 + SignedDuration::from_secs(31)),
            (Health::Unknown, String::new())
        );
        assert_eq!(
            c.get("drv", "p", "other", t0),
            (Health::Unknown, String::new())
        );
        // Not reported again and too old: dropped.
        assert!(c.update("drv", vec![], t0 + SignedDuration::from_secs(31)));
        c.update("drv", dev(Health::Healthy, "", 5), t0);
        c.clear("drv");
        assert_eq!(c.get("drv", "p", "d", t0).0, Health::Unknown);
        assert_eq!(
            HealthCache::open(&dir).get("drv", "p", "d", t0).0,
            Health::Unknown
        );
        // An unreadable file is logged and left: the cache starts empty.
        std::fs::write(dir.join(FILE), "{").unwrap();
        assert_eq!(
            HealthCache::open(&dir).get("drv", "p", "d", t0).0,
            Health::Unknown
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn long_messages_are_cut_as_upstream() {
        let long = "é".repeat(600);
        let t = truncate(&long);
        assert!(t.len() <= MAX_MESSAGE && t.ends_with("..."));
        assert_eq!(truncate("short"), "short");
    }
}
