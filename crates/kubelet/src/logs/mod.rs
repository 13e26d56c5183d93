//! Container logs: reading the CRI log files of a container (for the
//! kubelet API's `/containerLogs/{namespace}/{pod}/{container}` and for
//! `FallbackToLogsOnError` termination messages) and rendering them as
//! `kubectl logs` expects
//! (the content of each record, a newline after complete lines, with
//! `timestamps=true` each line prefixed by its RFC 3339 time).
//!
//! Query parameters: `tailLines`, `timestamps`, `follow`, `previous`,
//! `limitBytes`, `sinceSeconds` (as upstream's `PodLogOptions`). As
//! upstream, a request reads the live log file only; a followed log goes
//! on in the new file once the log is rotated ([`manager`], [`rotation`]).

pub mod legacy;
pub mod manager;
pub mod rotation;

use std::path::{Path, PathBuf};

use rkube_cri::logs::{parse_line, LogRecord, Timestamp};

/// The parsed query of a log request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Only the last N lines.
    pub tail_lines: Option<usize>,
    /// Prefix each line with its timestamp.
    pub timestamps: bool,
    /// Keep streaming new lines.
    pub follow: bool,
    /// The previous (restarted) instance of the container.
    pub previous: bool,
    /// Stop after this many bytes.
    pub limit_bytes: Option<usize>,
    /// Only lines newer than this many seconds.
    pub since_seconds: Option<u64>,
}

fn truthy(v: &str) -> bool {
    matches!(v, "true" | "1" | "True" | "TRUE" | "t" | "T")
}

/// Percent-decodes a query value.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl LogQuery {
    /// Parses `a=b&c=d`; bad numbers are errors.
    pub fn parse(query: &str) -> Result<LogQuery, String> {
        let mut q = LogQuery::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, "true"));
            let v = unescape(v);
            let num = |v: &str| {
                v.parse::<i64>()
                    .map_err(|_| format!("invalid {k}: {v:?}"))
                    .map(|n| n.max(0) as u64)
            };
            match k {
                "tailLines" => q.tail_lines = Some(num(&v)? as usize),
                "timestamps" => q.timestamps = truthy(&v),
                "follow" => q.follow = truthy(&v),
                "previous" => q.previous = truthy(&v),
                "limitBytes" => q.limit_bytes = Some(num(&v)? as usize),
                "sinceSeconds" => q.since_seconds = Some(num(&v)?),
                _ => {}
            }
        }
        Ok(q)
    }
}

/// The most a followed log reads at a time (CRI log lines are at most
/// 16 KiB of content).
pub const FOLLOW_CHUNK: usize = 1 << 20;

/// At most `max` bytes of `file` from `offset` on: a followed log reads
/// only what the file gained, never the whole file again.
pub async fn read_from(file: &Path, offset: usize, max: usize) -> std::io::Result<Vec<u8>> {
    read_at(&mut tokio::fs::File::open(file).await?, offset, max).await
}

/// At most `max` bytes of the open `file` from `offset` on (a followed
/// log keeps its file open across a rotation that renames it).
pub async fn read_at(
    file: &mut tokio::fs::File,
    offset: usize,
    max: usize,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    file.seek(std::io::SeekFrom::Start(offset as u64)).await?;
    let mut out = Vec::new();
    file.take(max as u64).read_to_end(&mut out).await?;
    Ok(out)
}

/// The log files (`<attempt>.log`) of a container directory, oldest
/// attempt first.
pub fn log_files(dir: &Path) -> Vec<(u32, PathBuf)> {
    let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_suffix(".log")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort();
    files
}

/// Whether `dir` holds the log of an attempt newer than `file`'s.
pub fn newer_attempt(dir: &Path, file: &Path) -> bool {
    let attempt = |p: &Path| {
        p.file_name()?
            .to_str()?
            .strip_suffix(".log")?
            .parse::<u32>()
            .ok()
    };
    let Some(mine) = attempt(file) else {
        return false;
    };
    log_files(dir).iter().any(|(n, _)| *n > mine)
}

/// The file to read: the newest attempt, or the one before it.
pub fn pick(dir: &Path, previous: bool) -> Option<PathBuf> {
    let files = log_files(dir);
    let skip = usize::from(previous);
    files.into_iter().rev().nth(skip).map(|(_, p)| p)
}

/// Renders one record.
pub fn render_record(r: &LogRecord, timestamps: bool, out: &mut Vec<u8>) {
    if timestamps {
        out.extend_from_slice(r.time.as_bytes());
        out.push(b' ');
    }
    out.extend_from_slice(&r.content);
    if !r.partial {
        out.push(b'\n');
    }
}

/// Renders the complete lines of `bytes` (a CRI log) for `q`; `now_ns`
/// for `sinceSeconds`. Returns the output and the number of bytes of input
/// consumed (up to the last newline; a torn last line is left for later).
/// `tailLines` counts the file's records, as upstream's reader does (a
/// line the runtime split in parts counts once per part, and the tail may
/// begin with a line's last part), and `sinceSeconds` filters what the
/// tail holds.
pub fn render(bytes: &[u8], q: &LogQuery, now_ns: i128) -> (Vec<u8>, usize) {
    let consumed = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let since = q
        .since_seconds
        .map(|s| Timestamp(now_ns - s as i128 * 1_000_000_000));
    let lines: Vec<&[u8]> = bytes[..consumed]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let start = q.tail_lines.map_or(0, |n| lines.len().saturating_sub(n));
    let mut out = Vec::new();
    let records = lines[start..]
        .iter()
        .filter_map(|l| parse_line(l).ok())
        .filter(|r| since.is_none_or(|s| r.timestamp >= s));
    for r in records {
        render_record(&r, q.timestamps, &mut out);
    }
    if let Some(limit) = q.limit_bytes {
        out.truncate(limit);
    }
    (out, consumed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2024-01-02T03:04:05.000000001Z stdout F one\n\
2024-01-02T03:04:06.000000001Z stderr F two\n\
2024-01-02T03:04:07.000000001Z stdout P thr\n\
2024-01-02T03:04:07.000000002Z stdout F ee\n\
2024-01-02T03:04:08.000000001Z stdout F fo";

    #[test]
    fn renders_lines_and_keeps_a_torn_tail() {
        let (out, used) = render(LOG, &LogQuery::default(), 0);
        assert_eq!(String::from_utf8(out).unwrap(), "one\ntwo\nthree\n");
        assert_eq!(&LOG[used..], b"2024-01-02T03:04:08.000000001Z stdout F fo");
    }

    #[test]
    fn tail_timestamps_and_limits() {
        // The last records of the file, as upstream's reader counts them:
        // a split line counts once per part.
        let q = LogQuery::parse("tailLines=3&timestamps=true").unwrap();
        let (out, _) = render(LOG, &q, 0);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2024-01-02T03:04:06.000000001Z two\n2024-01-02T03:04:07.000000001Z thr2024-01-02T03:04:07.000000002Z ee\n"
        );
        let (out, _) = render(LOG, &LogQuery::parse("tailLines=2").unwrap(), 0);
        assert_eq!(out, b"three\n");
        let (out, _) = render(LOG, &LogQuery::parse("tailLines=1").unwrap(), 0);
        assert_eq!(out, b"ee\n");
        let (out, _) = render(LOG, &LogQuery::parse("tailLines=9").unwrap(), 0);
        assert_eq!(out, b"one\ntwo\nthree\n");
        let (out, _) = render(LOG, &LogQuery::parse("tailLines=0").unwrap(), 0);
        assert_eq!(out, b"");
        let (out, _) = render(LOG, &LogQuery::parse("limitBytes=5").unwrap(), 0);
        assert_eq!(out, b"one\nt");
        // 2024-01-02T03:04:06Z is 1704164646 s; 1 s later, sinceSeconds=1 keeps two and three
        let now = 1_704_164_647i128 * 1_000_000_000;
        let (out, _) = render(LOG, &LogQuery::parse("sinceSeconds=1").unwrap(), now);
        assert_eq!(out, b"two\nthree\n");
    }

    #[test]
    fn queries() {
        let q = LogQuery::parse("follow=true&previous=1&tailLines=10&x=y").unwrap();
        assert!(q.follow && q.previous && !q.timestamps);
        assert_eq!(q.tail_lines, Some(10));
        assert!(LogQuery::parse("tailLines=abc").is_err());
        assert_eq!(unescape("a%20b+c%2"), "a b c%2");
    }

    #[test]
    fn picks_newest_or_previous_attempt() {
        let dir = std::env::temp_dir().join(format!("rkube-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in [0, 1, 10] {
            std::fs::write(dir.join(format!("{n}.log")), b"").unwrap();
        }
        std::fs::write(dir.join("x.txt"), b"").unwrap();
        assert_eq!(pick(&dir, false).unwrap(), dir.join("10.log"));
        assert_eq!(pick(&dir, true).unwrap(), dir.join("1.log"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(pick(&dir, false), None);
    }

    #[test]
    fn only_a_newer_attempt_ends_a_follow() {
        let dir = std::env::temp_dir().join(format!("rkube-logs-newer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("1.log"), b"").unwrap();
        // 2.log renamed away by a rotation, not yet reopened: not newer.
        assert!(!newer_attempt(&dir, &dir.join("2.log")));
        std::fs::write(dir.join("2.log"), b"").unwrap();
        assert!(!newer_attempt(&dir, &dir.join("2.log")));
        std::fs::write(dir.join("2.log.20261205-101010"), b"").unwrap();
        assert!(!newer_attempt(&dir, &dir.join("2.log")));
        std::fs::write(dir.join("3.log"), b"").unwrap();
        assert!(newer_attempt(&dir, &dir.join("2.log")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_followed_log_reads_only_what_it_gained() {
        let dir = std::env::temp_dir().join(format!("rkube-logs-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("0.log");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read_from(&f, 4, 3).await.unwrap(), b"456");
        assert_eq!(read_from(&f, 8, 100).await.unwrap(), b"89");
        assert!(read_from(&f, 10, 100).await.unwrap().is_empty());
        assert!(read_from(&f, 50, 100).await.unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
