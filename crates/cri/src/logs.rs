//! The CRI container log format.
//!
//! A CRI runtime writes each container's stdout and stderr to the file named
//! by `ContainerConfig.log_path` (below the sandbox's `log_directory`), one
//! record per line:
//!
//! ```text
//! 2016-10-06T00:17:09.669794202Z stdout F a complete line
//! 2016-10-06T00:17:09.669794202Z stderr P the first part of a long line, then
//! 2016-10-06T00:17:09.669794203Z stderr F the rest of it
//! ```
//!
//! `<RFC3339Nano timestamp> <stream> <tags> <content>`: the tags are
//! `:`-separated and the first is `F` (full: the line ended with a newline,
//! which is not written) or `P` (partial: the runtime split a long line, the
//! next record of the same stream continues it).
//!
//! [`parse_line`] parses one record, [`parse_log`] a whole file's bytes, and
//! [`assemble`] joins partial records into [`LogMessage`]s, as `kubectl logs`
//! shows them.
//!
//! ```
//! use rkube_cri::logs::{assemble, parse_log, LogStream};
//! let text = b"2024-01-02T03:04:05.000000001Z stdout P hel\n\
//!              2024-01-02T03:04:05.000000002Z stdout F lo\n";
//! let (records, errors) = parse_log(text);
//! assert!(errors.is_empty());
//! let messages = assemble(&records);
//! assert_eq!(messages[0].stream, LogStream::Stdout);
//! assert_eq!(messages[0].content, b"hello");
//! ```

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

/// Which output stream a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    /// The container's standard output.
    Stdout,
    /// The container's standard error.
    Stderr,
}

impl LogStream {
    /// The stream's name as written in the log (`stdout` / `stderr`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

impl fmt::Display for LogStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A point in time from a log record: nanoseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i128);

impl Timestamp {
    /// Parses an RFC 3339 timestamp with optional fraction (up to 9 digits)
    /// and a `Z` or `±hh:mm` offset, e.g. `2024-01-02T03:04:05.123456789Z`.
    pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
            return None;
        }
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let part = &b[r];
            if part.iter().all(u8::is_ascii_digit) {
                std::str::from_utf8(part).ok()?.parse().ok()
            } else {
                None
            }
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 60
        {
            return None;
        }
        let mut i = 19;
        let mut nanos: i64 = 0;
        if b[i] == b'.' {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let digits = i - start;
            if digits == 0 || digits > 9 {
                return None;
            }
            nanos = num(start..i)? * 10i64.pow(9 - digits as u32);
        }
        let offset_secs = match b.get(i..)? {
            [b'Z' | b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let h = num(i + 1..i + 3)?;
                let m = num(i + 4..i + 6)?;
                let _ = (h1, h2, m1, m2);
                if h > 23 || m > 59 {
                    return None;
                }
                let off = h * 3600 + m * 60;
                if *sign == b'+' {
                    off
                } else {
                    -off
                }
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
        Some(Timestamp(secs as i128 * 1_000_000_000 + nanos as i128))
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (month 1..=12).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    // Count from 0000-03-01 so the leap day is the last day of the "year".
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One record (line) of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// The timestamp as written (RFC 3339 with nanoseconds).
    pub time: String,
    /// The parsed timestamp.
    pub timestamp: Timestamp,
    /// Which stream the record belongs to.
    pub stream: LogStream,
    /// `true` for a `P` record: the content continues in the next record of
    /// the same stream.
    pub partial: bool,
    /// The content, without the trailing newline.
    pub content: Vec<u8>,
}

impl LogRecord {
    /// The content as text (invalid UTF-8 replaced).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.content)
    }
}

/// Why a line is not a CRI log record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogParseError {
    /// The line ends within its header: no space after the named field
    /// (`timestamp`, `stream`; the tags may end the line).
    #[error("line ends after the {0} field")]
    Missing(&'static str),
    /// The timestamp is not RFC 3339.
    #[error("invalid timestamp {0:?}")]
    Timestamp(String),
    /// The stream is neither `stdout` nor `stderr`.
    #[error("invalid stream {0:?}")]
    Stream(String),
    /// The first tag is neither `F` nor `P`.
    #[error("invalid tag {0:?}")]
    Tag(String),
}

fn split_field<'a>(rest: &mut &'a [u8], what: &'static str) -> Result<&'a [u8], LogParseError> {
    match rest.iter().position(|&c| c == b' ') {
        Some(i) => {
            let field = &rest[..i];
            *rest = &rest[i + 1..];
            Ok(field)
        }
        None if what == "tags" && !rest.is_empty() => {
            // a record with empty content may lack the final space
            let field = *rest;
            *rest = &[];
            Ok(field)
        }
        None => Err(LogParseError::Missing(what)),
    }
}

/// Parses one record; `line` may end in `\n` (and `\r\n`), which is dropped.
pub fn parse_line(line: &[u8]) -> Result<LogRecord, LogParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut rest = line;
    let time = split_field(&mut rest, "timestamp")?;
    let time = String::from_utf8_lossy(time).into_owned();
    let timestamp =
        Timestamp::parse_rfc3339(&time).ok_or_else(|| LogParseError::Timestamp(time.clone()))?;
    let stream = match split_field(&mut rest, "stream")? {
        b"stdout" => LogStream::Stdout,
        b"stderr" => LogStream::Stderr,
        other => return Err(LogParseError::Stream(String::from_utf8_lossy(other).into())),
    };
    let tags = split_field(&mut rest, "tags")?;
    let first = tags.split(|&c| c == b':').next().unwrap_or_default();
    let partial = match first {
        b"F" => false,
        b"P" => true,
        _ => return Err(LogParseError::Tag(String::from_utf8_lossy(tags).into())),
    };
    Ok(LogRecord {
        time,
        timestamp,
        stream,
        partial,
        content: rest.to_vec(),
    })
}

/// Parses a whole log file's bytes. Returns the records and, separately,
/// the lines that did not parse (1-based line number and error); empty lines
/// are skipped. A last line without `\n` (being written) is parsed too.
pub fn parse_log(bytes: &[u8]) -> (Vec<LogRecord>, Vec<(usize, LogParseError)>) {
    let mut records = Vec::new();
    let mut errors = Vec::new();
    for (i, line) in bytes.split(|&c| c == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        match parse_line(line) {
            Ok(r) => records.push(r),
            Err(e) => errors.push((i + 1, e)),
        }
    }
    (records, errors)
}

/// A complete log line: partial records of one stream joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogMessage {
    /// Timestamp of the record that completed the line.
    pub timestamp: Timestamp,
    /// The stream.
    pub stream: LogStream,
    /// The full content, without the trailing newline.
    pub content: Vec<u8>,
    /// `false` if the log ended inside this line (its last record was `P`).
    pub complete: bool,
}

impl LogMessage {
    /// The content as text (invalid UTF-8 replaced).
    pub fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.content)
    }
}

/// Joins partial records per stream into messages, in the order the lines
/// were completed; unfinished lines come last, marked `complete: false`.
pub fn assemble(records: &[LogRecord]) -> Vec<LogMessage> {
    let mut out = Vec::new();
    let mut pending: [Option<LogMessage>; 2] = [None, None];
    for r in records {
        let slot = &mut pending[r.stream as usize];
        let msg = slot.get_or_insert_with(|| LogMessage {
            timestamp: r.timestamp,
            stream: r.stream,
            content: Vec::new(),
            complete: false,
        });
        msg.content.extend_from_slice(&r.content);
        msg.timestamp = r.timestamp;
        if !r.partial {
            let mut done = slot.take().expect("just inserted");
            done.complete = true;
            out.push(done);
        }
    }
    out.extend(pending.into_iter().flatten());
    out
}

/// Reads a CRI log file and returns its messages (unparsable lines skipped).
pub async fn read_log_file(path: impl AsRef<Path>) -> std::io::Result<Vec<LogMessage>> {
    let bytes = tokio::fs::read(path).await?;
    Ok(assemble(&parse_log(&bytes).0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// name, line, stream, partial, content
    type Case<'a> = (&'a str, &'a [u8], LogStream, bool, &'a [u8]);

    #[test]
    fn parses_full_and_partial_records() {
        let cases: &[Case] = &[
            (
                "full stdout",
                b"2016-10-06T00:17:09.669794202Z stdout F log content 1\n",
                LogStream::Stdout,
                false,
                b"log content 1",
            ),
            (
                "partial stderr",
                b"2016-10-06T00:17:09.669794203Z stderr P log content 2",
                LogStream::Stderr,
                true,
                b"log content 2",
            ),
            (
                "content keeps inner and trailing spaces",
                b"2016-10-06T00:17:09Z stdout F  a  b \n",
                LogStream::Stdout,
                false,
                b" a  b ",
            ),
            (
                "empty content with space",
                b"2016-10-06T00:17:09.1Z stdout F \n",
                LogStream::Stdout,
                false,
                b"",
            ),
            (
                "empty content without space",
                b"2016-10-06T00:17:09.1Z stdout F",
                LogStream::Stdout,
                false,
                b"",
            ),
            (
                "extra tags after F",
                b"2016-10-06T00:17:09Z stdout F:x:y text",
                LogStream::Stdout,
                false,
                b"text",
            ),
            (
                "non-UTF-8 content",
                b"2016-10-06T00:17:09Z stdout F \xff\xfe",
                LogStream::Stdout,
                false,
                b"\xff\xfe",
            ),
        ];
        for (name, line, stream, partial, content) in cases {
            let r = parse_line(line).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(r.stream, *stream, "{name}");
            assert_eq!(r.partial, *partial, "{name}");
            assert_eq!(r.content, *content, "{name}");
        }
    }

    #[test]
    fn rejects_malformed_records() {
        let cases: &[(&str, &[u8], LogParseError)] = &[
            ("empty", b"", LogParseError::Missing("timestamp")),
            (
                "timestamp only",
                b"2016-10-06T00:17:09Z",
                LogParseError::Missing("timestamp"),
            ),
            (
                "no tags",
                b"2016-10-06T00:17:09Z stdout",
                LogParseError::Missing("stream"),
            ),
            (
                "bad stream",
                b"2016-10-06T00:17:09Z stdin F x",
                LogParseError::Stream("stdin".into()),
            ),
            (
                "bad tag",
                b"2016-10-06T00:17:09Z stdout X x",
                LogParseError::Tag("X".into()),
            ),
            (
                "bad timestamp",
                b"yesterday stdout F x",
                LogParseError::Timestamp("yesterday".into()),
            ),
            (
                "docker json-file line",
                b"{\"log\":\"x\\n\",\"stream\":\"stdout\"}",
                LogParseError::Missing("timestamp"),
            ),
        ];
        for (name, line, want) in cases {
            assert_eq!(parse_line(line).unwrap_err(), *want, "{name}");
        }
    }

    #[test]
    fn timestamps() {
        let ok: &[(&str, i128)] = &[
            ("1970-01-01T00:00:00Z", 0),
            ("1970-01-01T00:00:01.5Z", 1_500_000_000),
            ("1970-01-01T00:00:00.000000001Z", 1),
            ("1969-12-31T23:59:59Z", -1_000_000_000),
            ("2000-02-29T00:00:00Z", 951_782_400_000_000_000),
            ("2016-10-06T00:17:09.669794202Z", 1_475_713_029_669_794_202),
            (
                "2016-10-06T02:17:09.669794202+02:00",
                1_475_713_029_669_794_202,
            ),
            (
                "2016-10-05T23:47:09.669794202-00:30",
                1_475_713_029_669_794_202,
            ),
        ];
        for (s, want) in ok {
            assert_eq!(Timestamp::parse_rfc3339(s), Some(Timestamp(*want)), "{s}");
        }
        for bad in [
            "2016-10-06 00:17:09Z",
            "2016-13-06T00:17:09Z",
            "2015-02-29T00:17:09Z",
            "2016-10-06T24:00:00Z",
            "2016-10-06T00:17:09",
            "2016-10-06T00:17:09.Z",
            "2016-10-06T00:17:09.1234567890Z",
            "2016-10-06T00:17:09+0200",
            "2016-10-06T00:17:09Zjunk",
            "２016-10-06T00:17:09Z",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn assembles_partials_per_stream() {
        let log = b"2024-01-01T00:00:00.1Z stdout P hel\n\
                    2024-01-01T00:00:00.2Z stderr F oops\n\
                    2024-01-01T00:00:00.3Z stdout P lo \n\
                    garbage\n\
                    \n\
                    2024-01-01T00:00:00.4Z stdout F world\n\
                    2024-01-01T00:00:00.5Z stderr P unfinished";
        let (records, errors) = parse_log(log);
        assert_eq!(records.len(), 5);
        assert_eq!(errors, vec![(4, LogParseError::Missing("timestamp"))]);
        let msgs = assemble(&records);
        let got: Vec<(LogStream, String, bool)> = msgs
            .iter()
            .map(|m| (m.stream, m.text().into_owned(), m.complete))
            .collect();
        assert_eq!(
            got,
            vec![
                (LogStream::Stderr, "oops".into(), true),
                (LogStream::Stdout, "hello world".into(), true),
                (LogStream::Stderr, "unfinished".into(), false),
            ]
        );
        assert_eq!(
            msgs[1].timestamp,
            Timestamp::parse_rfc3339("2024-01-01T00:00:00.4Z").unwrap()
        );
    }
}
