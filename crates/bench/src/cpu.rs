//! Where the CPU goes during a live run: the CPU time each process of the
//! control plane, the scheduler (or the ceiling's binder) and the bench
//! itself used between the scheduler's start and the last binding, and how
//! much of the machine was idle. On a machine whose cores the API server
//! shares with the scheduler, this is the profile of a live run: it shows
//! whether the API server was saturated and who made it work.

use std::path::Path;

/// CPU time of one process so far (user + system, all threads), in
/// seconds; `None` when the process is gone or `/proc` is unreadable.
pub fn process_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|ticks| ticks as f64 / ticks_per_second())
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock
/// ticks. The command name (field 2) may hold spaces and parentheses, so
/// fields are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11); // field 3 is the first
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// `/proc` counts in USER_HZ, which Linux fixes at 100 on every
/// architecture it still supports (whatever the kernel's own tick).
fn ticks_per_second() -> f64 {
    100.0
}

/// The machine's CPU time so far as (busy, total) clock ticks, summed over
/// every core (`/proc/stat`'s `cpu` line; idle and iowait are not busy).
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine(&stat)
}

fn parse_machine(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user.
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// The pid in a `hack/control-plane` pid file ("PID STARTTIME").
pub fn pid_file(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU seconds of named processes and of the machine over one interval.
#[derive(Debug, Clone)]
pub struct Interval {
    procs: Vec<(String, u32, f64)>,
    machine: Option<(u64, u64)>,
}

/// What one interval used.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    /// (process, CPU seconds), in the order they were named.
    pub seconds: Vec<(String, f64)>,
    /// Share of the machine's CPU time left idle, 0–1.
    pub idle: Option<f64>,
}

impl Interval {
    /// Starts counting for `procs` (name, pid) now.
    pub fn start(procs: &[(String, u32)]) -> Self {
        Interval {
            procs: procs
                .iter()
                .map(|(n, p)| (n.clone(), *p, process_seconds(*p).unwrap_or(0.0)))
                .collect(),
            machine: machine_ticks(),
        }
    }

    /// Ends the interval; `late` are processes started during it (all of
    /// their CPU time counts). A process that is gone counts as 0.
    pub fn end(self, late: &[(String, u32)]) -> Usage {
        let mut seconds: Vec<(String, f64)> = self
            .procs
            .iter()
            .map(|(n, p, s0)| {
                (
                    n.clone(),
                    (process_seconds(*p).unwrap_or(*s0) - s0).max(0.0),
                )
            })
            .collect();
        seconds.extend(
            late.iter()
                .map(|(n, p)| (n.clone(), process_seconds(*p).unwrap_or(0.0))),
        );
        let idle = match (self.machine, machine_ticks()) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                Some(1.0 - (b1.saturating_sub(b0)) as f64 / (t1 - t0) as f64)
            }
            _ => None,
        };
        Usage { seconds, idle }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // The command name holds a space and a parenthesis.
        let line =
            "4242 (kube ap) i) S 1 4242 4242 0 -1 4194560 100 0 0 0 731 269 0 0 20 0 12 0 555 0 0";
        assert_eq!(parse_stat(line), Some(1000));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn idle_and_iowait_are_not_busy() {
        let stat = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n";
        assert_eq!(parse_machine(stat), Some((160, 1000)));
        assert_eq!(parse_machine("cpu0 1 2 3 4\n"), None);
    }

    #[test]
    fn this_process_uses_cpu() {
        let me = std::process::id();
        let t = Interval::start(&[("me".into(), me)]);
        // Spin until /proc counts a tenth of a second more (however busy
        // the machine), for at most ten seconds of wall time.
        let mut x = 0u64;
        let before = process_seconds(me).unwrap();
        let spin = std::time::Instant::now();
        while process_seconds(me).unwrap() - before < 0.1
            && spin.elapsed() < std::time::Duration::from_secs(10)
        {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let u = t.end(&[]);
        assert_eq!(u.seconds.len(), 1);
        assert!(u.seconds[0].1 >= 0.1, "{:?}", u.seconds);
        assert!(u.idle.is_some_and(|i| (0.0..=1.0).contains(&i)));
        // A process that does not exist counts as nothing.
        let gone = Interval::start(&[]).end(&[("gone".into(), u32::MAX)]);
        assert_eq!(gone.seconds, vec![("gone".to_string(), 0.0)]);
    }
}
