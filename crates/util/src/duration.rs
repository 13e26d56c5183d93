//! Go-style durations as written in Kubernetes configs and flags (`15s`,
//! `1m30s`, `500ms`, `1.5h`), parsed as Go's `time.ParseDuration` does —
//! with integer nanoseconds and its overflow rule (at most `i64::MAX`
//! nanoseconds, about 292 years), so no input can overflow or panic.
//!
//! Unlike Go, a negative duration is refused: every duration rkube reads
//! (leases, periods, timeouts) must be non-negative.

use std::fmt;
use std::time::Duration;

/// The largest duration Go represents: `math.MaxInt64` nanoseconds.
pub const MAX: Duration = Duration::from_nanos(i64::MAX as u64);

/// Why a duration string was refused; the message follows Go's wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    input: String,
    kind: ErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ErrorKind {
    Invalid,
    MissingUnit,
    UnknownUnit(String),
    Negative,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = crate::quote(&self.input);
        match &self.kind {
            ErrorKind::Invalid => write!(f, "time: invalid duration {shown}"),
            ErrorKind::MissingUnit => write!(f, "time: missing unit in duration {shown}"),
            ErrorKind::UnknownUnit(u) => {
                write!(
                    f,
                    "time: unknown unit {} in duration {shown}",
                    crate::quote(u)
                )
            }
            ErrorKind::Negative => write!(f, "duration {shown} must not be negative"),
        }
    }
}

impl std::error::Error for DurationError {}

/// Nanoseconds per unit, as Go's `unitMap`.
fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration (surrounding white space ignored). Errors name the
/// problem as Go's `time.ParseDuration` does; negative values are refused.
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let input = s.trim();
    let err = |kind| DurationError {
        input: input.to_string(),
        kind,
    };
    let mut rest = input;
    let mut negative = false;
    if let Some(r) = rest.strip_prefix('-') {
        negative = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(err(ErrorKind::Invalid));
    }
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !rest.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(err(ErrorKind::Invalid));
        }
        // Whole part; overflow is an error, as in Go.
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let mut whole: u64 = 0;
        for b in rest[..digits].bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(b - b'0')))
                .filter(|&v| v <= LIMIT)
                .ok_or_else(|| err(ErrorKind::Invalid))?;
        }
        let had_whole = digits > 0;
        rest = &rest[digits..];
        // Fraction; digits past what fits are ignored, as in Go.
        let (mut frac, mut scale, mut had_frac) = (0u64, 1u64, false);
        if let Some(r) = rest.strip_prefix('.') {
            let digits = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            had_frac = digits > 0;
            let mut overflowed = false;
            for b in r[..digits].bytes() {
                if overflowed {
                    continue;
                }
                match frac
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(b - b'0')))
                    .filter(|&v| v <= LIMIT)
                {
                    Some(v) if scale <= LIMIT / 10 => {
                        frac = v;
                        scale *= 10;
                    }
                    _ => overflowed = true,
                }
            }
            rest = &r[digits..];
        }
        if !had_whole && !had_frac {
            return Err(err(ErrorKind::Invalid));
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        if unit.is_empty() {
            return Err(err(ErrorKind::MissingUnit));
        }
        let per = unit_nanos(unit).ok_or_else(|| err(ErrorKind::UnknownUnit(unit.to_string())))?;
        rest = &rest[unit_len..];
        let mut v = whole
            .checked_mul(per)
            .filter(|&v| v <= LIMIT)
            .ok_or_else(|| err(ErrorKind::Invalid))?;
        if frac > 0 {
            // Exact where Go rounds through float64; both stay within the limit.
            let part = (u128::from(frac) * u128::from(per) / u128::from(scale)) as u64;
            v = v
                .checked_add(part)
                .filter(|&v| v <= LIMIT)
                .ok_or_else(|| err(ErrorKind::Invalid))?;
        }
        total = total
            .checked_add(v)
            .filter(|&v| v <= LIMIT)
            .ok_or_else(|| err(ErrorKind::Invalid))?;
    }
    if negative && total > 0 {
        return Err(err(ErrorKind::Negative));
    }
    if total > LIMIT - 1 {
        return Err(err(ErrorKind::Invalid));
    }
    Ok(Duration::from_nanos(total))
}

/// [`parse`] without the reason: `None` when malformed, negative or too large.
pub fn parse_duration(s: &str) -> Option<Duration> {
    parse(s).ok()
}

/// Whole seconds as a [`Duration`], refusing what Go's `time.Duration`
/// cannot hold (a negative count, or more than `i64::MAX` nanoseconds).
pub fn from_secs_checked(secs: i64) -> Option<Duration> {
    let secs = u64::try_from(secs).ok()?;
    let d = Duration::from_secs(secs);
    (d <= MAX).then_some(d)
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1m0s`, `1.5s`, `500ms`,
/// `2µs`, `0s` (durations in messages read as kube-scheduler writes them).
pub fn format(d: Duration) -> String {
    let nanos = d.as_nanos().min(i64::MAX as u128) as u64;
    if nanos == 0 {
        return "0s".to_string();
    }
    // Below a second: one unit with a fraction.
    let fraction = |value: u64, unit_nanos: u64, unit: &str| {
        let whole = value / unit_nanos;
        let rest = value % unit_nanos;
        if rest == 0 {
            format!("{whole}{unit}")
        } else {
            let digits = unit_nanos.ilog10() as usize;
            let frac = format!("{rest:0digits$}");
            format!("{whole}.{}{unit}", frac.trim_end_matches('0'))
        }
    };
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return fraction(nanos, 1_000, "\u{b5}s");
    }
    if nanos < 1_000_000_000 {
        return fraction(nanos, 1_000_000, "ms");
    }
    let hours = nanos / 3_600_000_000_000;
    let minutes = nanos / 60_000_000_000 % 60;
    let seconds = fraction(nanos % 60_000_000_000, 1_000_000_000, "s");
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_go() {
        for (d, want) in [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_nanos(1_500), "1.5\u{b5}s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_micros(2_250), "2.25ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(15 * 60), "15m0s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::new(3723, 500_000_000), "1h2m3.5s"),
        ] {
            assert_eq!(format(d), want, "{d:?}");
        }
        assert_eq!(format(MAX), "2562047h47m16.854775807s");
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration(".5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_duration("+3s"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("2\u{b5}s"), Some(Duration::from_micros(2)));
        assert_eq!(parse_duration("2\u{3bc}s"), Some(Duration::from_micros(2)));
        assert_eq!(
            parse_duration("1h2m3s4ms5us6ns"),
            Some(Duration::new(3723, 4_005_006))
        );
        assert_eq!(parse_duration(" 10s\n"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("-0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
    }

    #[test]
    fn refuses_what_go_refuses_with_its_words() {
        for (input, message) in [
            ("", "time: invalid duration \"\""),
            ("10", "time: missing unit in duration \"10\""),
            ("s", "time: invalid duration \"s\""),
            (".s", "time: invalid duration \".s\""),
            ("1x", "time: unknown unit \"x\" in duration \"1x\""),
            ("3000000h", "time: invalid duration \"3000000h\""),
            (
                "99999999999999999999s",
                "time: invalid duration \"99999999999999999999s\"",
            ),
            (
                "9223372036854775808ns",
                "time: invalid duration \"9223372036854775808ns\"",
            ),
            ("-5s", "duration \"-5s\" must not be negative"),
        ] {
            assert_eq!(parse(input).unwrap_err().to_string(), message, "{input:?}");
        }
    }

    #[test]
    fn the_limit_is_go_max_int64_nanoseconds() {
        assert_eq!(parse("9223372036854775807ns"), Ok(MAX));
        assert_eq!(parse("2562047h47m16.854775807s"), Ok(MAX));
        assert!(parse("2562047h47m16.854775808s").is_err());
        assert!(parse("2562048h").is_err());
        // Many digits of fraction are ignored past what fits, not an error.
        assert_eq!(
            parse("1.0000000000000000000000000001s"),
            Ok(Duration::from_secs(1))
        );
    }

    #[test]
    fn hostile_values_are_clipped_and_escaped_in_messages() {
        let long = format!("{}x", "1".repeat(10_000));
        let msg = parse(&long).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
        let msg = parse("1\u{1b}[31m").unwrap_err().to_string();
        assert!(!msg.contains('\u{1b}'), "{msg:?}");
    }

    #[test]
    fn seconds_within_go_duration() {
        assert_eq!(from_secs_checked(10), Some(Duration::from_secs(10)));
        assert_eq!(from_secs_checked(-1), None);
        assert_eq!(from_secs_checked(i64::MAX), None);
        assert_eq!(
            from_secs_checked(9_223_372_036),
            Some(Duration::from_secs(9_223_372_036))
        );
        assert_eq!(from_secs_checked(9_223_372_037), None);
    }
}
