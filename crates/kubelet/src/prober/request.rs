//! The request an `httpGet` probe sends, as upstream's prober builds it
//! with Go's `net/url` and `net/http` (`pkg/probe/http/request.go`): the
//! path becomes a well-formed request target — characters a URL path may
//! not hold are percent-encoded, and a path Go cannot parse (a control
//! character in it) is encoded whole, query included — and a header Go
//! would refuse to send (an invalid name, or a control character in a
//! value) fails the probe with Go's message instead of being written. So a
//! pod's probe can never split the request line or smuggle a header.

/// Characters a path segment may hold unencoded (RFC 3986 pchar and '/').
fn path_char(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'/'
        )
}

/// Go's `shouldEscape(c, encodePath)`: what `url.PathEscape`-style
/// encoding of a whole path leaves as is.
fn kept_by_escape(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_'
                | b'.'
                | b'~'
                | b'$'
                | b'&'
                | b'+'
                | b','
                | b'/'
                | b':'
                | b';'
                | b'='
                | b'@'
        )
}

fn escape(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    for &b in raw {
        if kept_by_escape(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// `%XX` sequences decoded; `None` when one is malformed (Go's parse
/// error).
fn unescape(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let hi = hex(*s.get(i + 1)?)?;
            let lo = hex(*s.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Already a valid encoded path (Go keeps it as written).
fn valid_encoded(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                if s.get(i + 1).and_then(|&b| hex(b)).is_none()
                    || s.get(i + 2).and_then(|&b| hex(b)).is_none()
                {
                    return false;
                }
                i += 3;
                continue;
            }
            b'[' | b']' => {}
            b if path_char(b) => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

fn has_ctl(s: &[u8]) -> bool {
    s.iter().any(|&b| b < 0x20 || b == 0x7f)
}

/// The request target for the probe's `path` (fragment dropped, as Go's
/// `RequestURI`).
pub fn request_target(path: &str) -> String {
    let raw = path.as_bytes();
    // Go's url.Parse fails on a control character or a malformed escape;
    // upstream then uses the path as a literal path, which Go encodes whole.
    let parsed = (!has_ctl(raw))
        .then(|| {
            let no_fragment = raw.split(|&b| b == b'#').next().unwrap_or(&[]);
            let (p, q) = match no_fragment.iter().position(|&b| b == b'?') {
                Some(i) => (&no_fragment[..i], Some(&no_fragment[i + 1..])),
                None => (no_fragment, None),
            };
            let decoded = unescape(p)?;
            Some((p, decoded, q))
        })
        .flatten();
    let (target, query) = match parsed {
        None => (escape(raw), None),
        Some((p, decoded, q)) => {
            let path = if valid_encoded(p) {
                String::from_utf8_lossy(p).into_owned()
            } else {
                escape(&decoded)
            };
            (path, q)
        }
    };
    let target = if target.is_empty() {
        "/".to_string()
    } else if target.starts_with('/') {
        target
    } else {
        format!("/{target}")
    };
    match query {
        Some(q) => format!("{target}?{}", String::from_utf8_lossy(q)),
        None => target,
    }
}

/// Go's `httpguts.ValidHeaderFieldName`: a non-empty token.
fn valid_header_name(n: &str) -> bool {
    !n.is_empty()
        && n.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// The probe's headers as Go would send them: an empty `Accept` removes
/// every `Accept`; a header Go refuses is an error with Go's message.
pub fn request_headers(headers: &[(String, String)]) -> Result<Vec<(String, String)>, String> {
    let drop_accept = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("accept"))
        .is_some_and(|(_, v)| v.is_empty());
    let mut out = Vec::with_capacity(headers.len());
    for (k, v) in headers {
        if !valid_header_name(k) {
            return Err(format!("net/http: invalid header field name {k:?}"));
        }
        if v.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(format!("net/http: invalid header field value for {k:?}"));
        }
        if drop_accept && k.eq_ignore_ascii_case("accept") {
            continue;
        }
        out.push((k.clone(), v.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_well_formed_targets() {
        for (path, want) in [
            ("/healthz", "/healthz"),
            ("", "/"),
            ("healthz", "/healthz"),
            ("/a?b=c&d", "/a?b=c&d"),
            ("/a#frag", "/a"),
            ("/a%20b", "/a%20b"),
            ("/a b", "/a%20b"),
            ("/a b!", "/a%20b%21"),
            ("/ünï", "/%C3%BCn%C3%AF"),
            // A control character: Go cannot parse it, so the whole path is
            // encoded, query included; the request line cannot be split.
            (
                "/x HTTP/1.1\r\nHost: evil\r\n\r\nGET /y?z",
                "/x%20HTTP/1.1%0D%0AHost:%20evil%0D%0A%0D%0AGET%20/y%3Fz",
            ),
            ("/bad%zz", "/bad%25zz"),
        ] {
            assert_eq!(request_target(path), want, "{path:?}");
        }
    }

    #[test]
    fn headers_go_would_refuse_fail_the_probe() {
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert_eq!(request_headers(&h("X-Ok", "a\tb")), Ok(h("X-Ok", "a\tb")));
        assert_eq!(
            request_headers(&h("X-Evil", "a\r\nHost: evil")),
            Err("net/http: invalid header field value for \"X-Evil\"".into())
        );
        assert_eq!(
            request_headers(&h("Bad Name", "v")),
            Err("net/http: invalid header field name \"Bad Name\"".into())
        );
        assert_eq!(request_headers(&h("Accept", "")), Ok(vec![]));
    }
}
