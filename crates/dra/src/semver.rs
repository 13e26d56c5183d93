//! Semantic versions (semver 2.0.0) as DRA `version` attributes and the
//! Kubernetes CEL `semver` library use them: parsed strictly, ordered by
//! semver precedence (build metadata ignored).

use std::cmp::Ordering;

/// A parsed semantic version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
    /// Pre-release identifiers.
    pub pre: Vec<String>,
    /// Build metadata (not part of precedence).
    pub build: String,
}

fn number(s: &str, what: &str) -> Result<u64, String> {
    if s.is_empty() {
        return Err(format!("{what} number is empty"));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!(
            "{what} number must not contain leading zeroes {s:?}"
        ));
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("invalid character(s) found in {what} number {s:?}"));
    }
    s.parse()
        .map_err(|_| format!("{what} number {s:?} is too large"))
}

fn identifiers(s: &str, numeric_rule: bool) -> Result<Vec<String>, String> {
    s.split('.')
        .map(|id| {
            if id.is_empty() {
                return Err("empty identifier".to_string());
            }
            if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(format!("invalid character(s) found in identifier {id:?}"));
            }
            if numeric_rule
                && id.bytes().all(|b| b.is_ascii_digit())
                && id.len() > 1
                && id.starts_with('0')
            {
                return Err(format!(
                    "numeric identifier must not contain leading zeroes {id:?}"
                ));
            }
            Ok(id.to_string())
        })
        .collect()
}

impl Version {
    /// Parses `MAJOR.MINOR.PATCH[-PRE][+BUILD]` strictly.
    pub fn parse(s: &str) -> Result<Version, String> {
        let (rest, build) = match s.split_once('+') {
            Some((r, b)) => {
                identifiers(b, false)?;
                (r, b.to_string())
            }
            None => (s, String::new()),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, identifiers(p, true)?),
            None => (rest, Vec::new()),
        };
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() != 3 {
            return Err("no Major.Minor.Patch elements found".to_string());
        }
        Ok(Version {
            major: number(parts[0], "major")?,
            minor: number(parts[1], "minor")?,
            patch: number(parts[2], "patch")?,
            pre,
            build,
        })
    }
}

fn cmp_identifier(a: &str, b: &str) -> Ordering {
    let an = a.bytes().all(|c| c.is_ascii_digit());
    let bn = b.bytes().all(|c| c.is_ascii_digit());
    match (an, bn) {
        // Numeric identifiers have no leading zeroes: longer is larger.
        (true, true) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.cmp(b),
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(&other.pre) {
                        let o = cmp_identifier(a, b);
                        if o != Ordering::Equal {
                            return o;
                        }
                    }
                    self.pre.len().cmp(&other.pre.len())
                }
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre.join("."))?;
        }
        if !self.build.is_empty() {
            write!(f, "+{}", self.build)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn precedence_follows_semver_2() {
        // semver.org's own example chain.
        let chain = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "2.0.0",
            "2.1.0",
            "2.1.1",
        ];
        for w in chain.windows(2) {
            assert!(v(w[0]) < v(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(v("1.0.0+build.1").cmp(&v("1.0.0+other")), Ordering::Equal);
    }

    #[test]
    fn strict_parsing() {
        for bad in [
            "1.0",
            "01.0.0",
            "1.0.0-01",
            "1.0.0-",
            "v1.0.0",
            "1.0.0-a..b",
            "1.a.0",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad} should not parse");
        }
        assert_eq!(v("1.2.3-rc.1+b5").to_string(), "1.2.3-rc.1+b5");
    }
}
