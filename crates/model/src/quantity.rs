//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`, ...), parsed exactly
//! as `k8s.io/apimachinery/pkg/api/resource` parses them, and read out as
//! integers the way the scheduler reads them (`MilliValue()` for CPU,
//! `Value()` for everything else): rounded up, away from zero.

use std::fmt;

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string is not of the form `<signedNumber><suffix>`.
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    /// The suffix is not one Kubernetes knows.
    #[error("unable to parse quantity's suffix")]
    Suffix,
}

/// A parsed quantity, held exactly in billionths of a unit (upstream's
/// finest suffix is `n`); finer digits round up, away from zero, as
/// upstream's `ScaledValue` does. Saturates far beyond any real value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

const NANO_SCALE: i32 = 9;
const SATURATE: i128 = i128::MAX / 1024;

impl Quantity {
    /// A quantity of whole units.
    pub fn from_units(v: i64) -> Self {
        Quantity {
            nanos: v as i128 * 1_000_000_000,
        }
    }

    /// A quantity of thousandths of a unit.
    pub fn from_milli(v: i64) -> Self {
        Quantity {
            nanos: v as i128 * 1_000_000,
        }
    }

    /// Parses a quantity string.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(QuantityError::Format);
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            i = 1;
        }
        // value = mantissa × 10^dec_exp × 2^bin_exp
        let mut mantissa: i128 = 0;
        let mut dec_exp: i64 = 0;
        let mut bin_exp: u32 = 0;
        let mut lost_nonzero = false;
        let mut digits = 0usize;
        let mut seen_dot = false;
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_digit() {
                digits += 1;
                let d = (c - b'0') as i128;
                if mantissa < SATURATE / 10 {
                    mantissa = mantissa * 10 + d;
                    if seen_dot {
                        dec_exp -= 1;
                    }
                } else {
                    lost_nonzero |= d != 0;
                    if !seen_dot {
                        dec_exp += 1;
                    }
                }
            } else if c == b'.' && !seen_dot {
                seen_dot = true;
            } else {
                break;
            }
            i += 1;
        }
        if digits == 0 {
            return Err(QuantityError::Format);
        }
        let suffix = &s[i..];
        match suffix {
            "" => {}
            "n" => dec_exp -= 9,
            "u" => dec_exp -= 6,
            "m" => dec_exp -= 3,
            "k" => dec_exp += 3,
            "M" => dec_exp += 6,
            "G" => dec_exp += 9,
            "T" => dec_exp += 12,
            "P" => dec_exp += 15,
            "E" => dec_exp += 18,
            "Ki" => bin_exp = 10,
            "Mi" => bin_exp = 20,
            "Gi" => bin_exp = 30,
            "Ti" => bin_exp = 40,
            "Pi" => bin_exp = 50,
            "Ei" => bin_exp = 60,
            _ => {
                let rest = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))
                    .ok_or_else(|| {
                        if suffix
                            .bytes()
                            .all(|b| b"eEinumkKMGTP+-0123456789".contains(&b))
                        {
                            QuantityError::Suffix
                        } else {
                            QuantityError::Format
                        }
                    })?;
                let exp = parse_signed_int(rest).ok_or(QuantityError::Suffix)?;
                dec_exp += exp.clamp(-100_000, 100_000);
            }
        }
        let mut n = mantissa;
        for _ in 0..bin_exp {
            n = n.saturating_mul(2).min(SATURATE);
        }
        let e = dec_exp + NANO_SCALE as i64;
        if e >= 0 {
            for _ in 0..e.min(80) {
                n = n.saturating_mul(10).min(SATURATE);
            }
            if lost_nonzero {
                n = n.saturating_add(1).min(SATURATE);
            }
        } else {
            let mut rem = lost_nonzero;
            for _ in 0..(-e).min(80) {
                rem |= n % 10 != 0;
                n /= 10;
            }
            if -e > 80 && n != 0 {
                rem = true;
                n = 0;
            }
            if rem {
                n += 1;
            }
        }
        Ok(Quantity {
            nanos: if negative { -n } else { n },
        })
    }

    /// The value at `10^-scale` units (0 ≤ scale ≤ 9), rounded away from
    /// zero, saturating at the `i64` range: `scaled(3)` is `MilliValue()`.
    pub fn scaled(&self, scale: i32) -> i64 {
        let div = 10i128.pow((NANO_SCALE - scale.clamp(0, NANO_SCALE)) as u32);
        let mag = self.nanos.unsigned_abs() as i128;
        let mut q = mag / div;
        if mag % div != 0 {
            q += 1;
        }
        let q = q.min(i64::MAX as i128) as i64;
        if self.nanos < 0 {
            -q
        } else {
            q
        }
    }

    /// Upstream's `Value()`: whole units, rounded up.
    pub fn value(&self) -> i64 {
        self.scaled(0)
    }

    /// Upstream's `MilliValue()`: thousandths, rounded up.
    pub fn milli_value(&self) -> i64 {
        self.scaled(3)
    }

    /// True for a zero quantity.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// True for a negative quantity.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// Exact sum (saturating).
    pub fn checked_add(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self
                .nanos
                .saturating_add(other.nanos)
                .clamp(-SATURATE, SATURATE),
        }
    }

    /// The opposite quantity.
    pub fn negated(&self) -> Quantity {
        Quantity { nanos: -self.nanos }
    }

    /// Compares values.
    pub fn cmp_value(&self, other: &Quantity) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

fn parse_signed_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.as_bytes().first()? {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: i64 = digits.parse().unwrap_or(i64::MAX);
    Some(if neg { -v } else { v })
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

/// Formats milli-CPU the way `kubectl` shows it: `2`, `250m`.
pub fn format_milli(milli: i64) -> String {
    if milli % 1000 == 0 {
        format!("{}", milli / 1000)
    } else {
        format!("{milli}m")
    }
}

/// Formats a byte count with the largest binary suffix that divides it exactly.
pub fn format_bytes(bytes: i64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    if bytes != 0 {
        for (suffix, shift) in SUFFIXES {
            let unit = 1i64 << shift;
            if bytes % unit == 0 {
                return format!("{}{suffix}", bytes / unit);
            }
        }
    }
    bytes.to_string()
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let milli = self.milli_value();
        if milli % 1000 == 0 {
            write!(f, "{}", milli / 1000)
        } else {
            write!(f, "{milli}m")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn milli_values_round_up() {
        // Values from apimachinery's quantity_test.go (TestQuantityParse / ScaledValue).
        let cases = [
            ("100m", 100),
            ("1", 1000),
            ("1.5", 1500),
            ("0.1m", 1),
            (".5", 500),
            ("5.", 5000),
            ("2e3", 2_000_000),
            ("1e-3", 1),
            ("1n", 1),
            ("0", 0),
            ("-100m", -100),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
        ];
        for (s, want) in cases {
            assert_eq!(q(s).milli_value(), want, "{s}");
        }
    }

    #[test]
    fn values_round_up() {
        let cases = [
            ("1Gi", 1 << 30),
            ("1.5Gi", 3 << 29),
            ("500M", 500_000_000),
            ("128974848", 128_974_848),
            ("129e6", 129_000_000),
            ("123Mi", 123 << 20),
            ("1.5", 2),
            ("100m", 1),
            ("0.5Ki", 512),
            ("1E", 1_000_000_000_000_000_000),
            ("8Ei", i64::MAX),
            ("+7", 7),
            ("1e+2", 100),
            ("1E2", 100),
        ];
        for (s, want) in cases {
            assert_eq!(q(s).value(), want, "{s}");
        }
    }

    #[test]
    fn rejects_malformed() {
        for s in [
            "", " ", "abc", "1.2.3", "1Gb", "1KiB", "e3", "1e", "1e+", "--1", ".", "1 Gi", "Ki",
        ] {
            assert!(Quantity::parse(s).is_err(), "{s:?} should be rejected");
        }
    }

    #[test]
    fn huge_values_saturate() {
        let long = format!("{}Ei", "9".repeat(80));
        assert!(q("0.1m").checked_add(&q("0.1m")).milli_value() == 1);
        assert_eq!(q(&long).value(), i64::MAX);
        assert_eq!(q("1e10000").milli_value(), i64::MAX);
        assert_eq!(q("1e-10000").milli_value(), 1);
    }

    #[test]
    fn formats() {
        assert_eq!(format_milli(3200), "3200m");
        assert_eq!(format_milli(4000), "4");
        assert_eq!(format_bytes(4 << 30), "4Gi");
        assert_eq!(format_bytes(1_000_000), "1000000");
        assert_eq!(format_bytes(0), "0");
    }
}
