//! `/logs/`: the node's log files under `/var/log`, as upstream's kubelet
//! serves them with `enableSystemLogHandler` (a file server on `/var/log/`
//! behind `nodes/log`; `kubectl get --raw
//! /api/v1/nodes/NODE/proxy/logs/`). A directory is listed as Go's file
//! server lists it, a file's bytes are streamed. A path is opened with the
//! symlinks in it followed (the `/var/log/containers` links are absolute)
//! and served only if what was opened lies beneath the root; a `..` is
//! refused as Go's file server refuses it.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rkube_daemon::server::{self, Body, Response, StatusCode};
use tokio::io::AsyncReadExt;

/// Upstream's root.
pub const ROOT: &str = "/var/log";

/// Most entries of a directory listed.
const MAX_ENTRIES: usize = 100_000;
/// The chunk a file is streamed in.
const CHUNK: usize = 64 << 10;

/// What `/logs<rest>` answers (`rest`: the rest of the path, still
/// percent-encoded: empty, or starting with `/`).
pub async fn serve(root: &Path, rest: &str) -> Response {
    let Some(rel) = rest.strip_prefix('/') else {
        // Upstream's mux sends `/logs` to `/logs/`.
        return redirect("logs/");
    };
    let Some(decoded) = percent_decode(rel) else {
        return server::text(
            StatusCode::BAD_REQUEST,
            "400 bad request: the path is not valid UTF-8 once decoded",
        );
    };
    if decoded.split('/').any(|c| c == "..") {
        return server::text(StatusCode::BAD_REQUEST, "invalid URL path");
    }
    let root = root.to_path_buf();
    match tokio::task::spawn_blocking(move || open(&root, &decoded)).await {
        Ok(Ok(Opened::Dir(names))) => server::respond(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Body::whole(listing(&names)),
        ),
        Ok(Ok(Opened::Redirect(to))) => redirect(&to),
        Ok(Ok(Opened::File(file))) => {
            let (tx, body) = Body::channel(4);
            tokio::spawn(stream(tokio::fs::File::from_std(file), tx));
            server::respond(StatusCode::OK, server::TEXT, body)
        }
        Ok(Err(refused)) => refused.response(),
        Err(e) => server::internal_error(&e),
    }
}

fn redirect(to: &str) -> Response {
    let mut r = server::text(StatusCode::MOVED_PERMANENTLY, "");
    if let Ok(v) = http::HeaderValue::from_str(to) {
        r.headers_mut().insert(http::header::LOCATION, v);
    }
    r
}

enum Opened {
    /// A directory's entries (directories with a trailing `/`), sorted.
    Dir(Vec<String>),
    /// A file, open for reading.
    File(std::fs::File),
    /// Where to go instead (Go's file server's canonical URLs: a
    /// directory ends with `/`, a file does not).
    Redirect(String),
}

fn open(root: &Path, rel: &str) -> Result<Opened, Refused> {
    let want_dir = rel.is_empty() || rel.ends_with('/');
    let sub = rel.trim_matches('/');
    let real_root = std::fs::canonicalize(root).map_err(io_error)?;
    // O_NONBLOCK: a FIFO in the tree must not hold the open.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(root.join(sub))
        .map_err(io_error)?;
    // What was opened, wherever the symlinks on the way led.
    let real =
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(io_error)?;
    if !real.starts_with(&real_root) {
        return Err(Refused::Forbidden);
    }
    let meta = file.metadata().map_err(io_error)?;
    let base = sub.rsplit('/').next().unwrap_or(sub);
    if !meta.is_dir() && !meta.is_file() {
        return Err(Refused::Forbidden);
    }
    match (meta.is_dir(), want_dir) {
        (true, true) => {}
        (true, false) => return Ok(Opened::Redirect(format!("{}/", href(base)))),
        (false, true) => return Ok(Opened::Redirect(format!("../{}", href(base)))),
        (false, false) => return Ok(Opened::File(file)),
    }
    let mut entries: Vec<(String, bool)> = Vec::new();
    for entry in std::fs::read_dir(&real).map_err(io_error)? {
        let Ok(entry) = entry else { continue };
        // Names that are not UTF-8 cannot be asked for in this API's paths.
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        entries.push((name, entry.file_type().is_ok_and(|t| t.is_dir())));
        if entries.len() >= MAX_ENTRIES {
            break;
        }
    }
    // Go sorts by the bare name.
    entries.sort();
    Ok(Opened::Dir(
        entries
            .into_iter()
            .map(|(n, dir)| if dir { format!("{n}/") } else { n })
            .collect(),
    ))
}

async fn stream(mut file: tokio::fs::File, tx: tokio::sync::mpsc::Sender<bytes::Bytes>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match file.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx
                    .send(bytes::Bytes::copy_from_slice(&buf[..n]))
                    .await
                    .is_err()
                {
                    return; // the client went away
                }
            }
        }
    }
}

/// Why a path is not served (Go's `toHTTPError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    NotFound,
    Forbidden,
    Internal,
}

impl Refused {
    fn response(self) -> Response {
        match self {
            Refused::NotFound => server::text(StatusCode::NOT_FOUND, "404 page not found"),
            Refused::Forbidden => server::text(StatusCode::FORBIDDEN, "403 Forbidden"),
            Refused::Internal => server::text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "500 Internal Server Error",
            ),
        }
    }
}

fn io_error(e: std::io::Error) -> Refused {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory => Refused::NotFound,
        std::io::ErrorKind::PermissionDenied => Refused::Forbidden,
        _ => Refused::Internal,
    }
}

/// Go's file server's directory listing.
fn listing(names: &[String]) -> String {
    let mut out = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for n in names {
        out.push_str(&format!("<a href=\"{}\">{}</a>\n", href(n), html_escape(n)));
    }
    out.push_str("</pre>\n");
    out
}

/// `url.URL{Path: name}.String()`: the name escaped as a path, with `./`
/// before a first segment holding a colon.
fn href(name: &str) -> String {
    let escaped = percent_encode(name);
    let first = name.split('/').next().unwrap_or("");
    if first.contains(':') {
        format!("./{escaped}")
    } else {
        escaped
    }
}

/// Go's `htmlReplacer`.
fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// What Go's `url.URL.EscapedPath` escapes in a path (`encodePath`): all
/// but the unreserved characters and `$&+,/:;=@`.
const GO_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b',')
    .remove(b':')
    .remove(b';')
    .remove(b'=')
    .remove(b'@');

fn percent_encode(s: &str) -> String {
    utf8_percent_encode(s, GO_PATH).to_string()
}

/// `%XX` decoded; `None` when the bytes are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn get(root: &Path, rel: &str) -> (u16, String, Option<String>) {
        let r = serve(root, &format!("/{rel}")).await;
        let code = r.status().as_u16();
        let location = r
            .headers()
            .get(http::header::LOCATION)
            .map(|v| v.to_str().unwrap().to_string());
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8_lossy(&body).into_owned(), location)
    }

    #[tokio::test]
    async fn lists_serves_and_stays_beneath_the_root() {
        let base = std::env::temp_dir().join(format!("rkube-syslogs-{}", std::process::id()));
        let root = base.join("log");
        std::fs::create_dir_all(root.join("pods/ns_p_u")).unwrap();
        std::fs::write(root.join("syslog"), "line one\nline two\n").unwrap();
        std::fs::write(root.join("a <b>.log"), "x").unwrap();
        std::fs::write(root.join("pods.log"), "").unwrap();
        std::fs::write(base.join("secret"), "not a log").unwrap();
        std::os::unix::fs::symlink(base.join("secret"), root.join("escape")).unwrap();
        std::os::unix::fs::symlink("syslog", root.join("inside")).unwrap();
        let big = "0123456789".repeat(20_000);
        std::fs::write(root.join("pods/ns_p_u/big.log"), &big).unwrap();

        let (code, body, _) = get(&root, "").await;
        assert_eq!(code, 200);
        assert_eq!(
            body,
            "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n\
             <a href=\"a%20%3Cb%3E.log\">a &lt;b&gt;.log</a>\n<a href=\"escape\">escape</a>\n\
             <a href=\"inside\">inside</a>\n<a href=\"pods/\">pods/</a>\n<a href=\"pods.log\">pods.log</a>\n\
             <a href=\"syslog\">syslog</a>\n</pre>\n"
        );
        assert_eq!(get(&root, "syslog").await.1, "line one\nline two\n");
        assert_eq!(get(&root, "a%20%3Cb%3E.log").await.1, "x");
        assert_eq!(
            get(&root, "pods/ns_p_u/big.log").await.1,
            big,
            "streamed whole"
        );
        assert_eq!(get(&root, "inside").await.1, "line one\nline two\n");
        // An absolute link inside the root, as /var/log/containers' are.
        std::os::unix::fs::symlink(root.join("syslog"), root.join("absolute")).unwrap();
        assert_eq!(get(&root, "absolute").await.1, "line one\nline two\n");
        assert_eq!(
            serve(&root, "").await.status().as_u16(),
            301,
            "/logs goes to /logs/"
        );
        // Canonical URLs, as Go's file server redirects to them.
        assert_eq!(get(&root, "pods").await.2.as_deref(), Some("pods/"));
        assert_eq!(get(&root, "syslog/").await.2.as_deref(), Some("../syslog"));
        // Nothing outside the root, however asked for.
        assert_eq!(get(&root, "escape").await.0, 403);
        assert_eq!(get(&root, "../secret").await.0, 400);
        assert_eq!(get(&root, "%2E%2E/secret").await.0, 400);
        assert_eq!(get(&root, "missing.log").await.0, 404);
        assert_eq!(get(&root, "%ff").await.0, 400);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn go_escapes() {
        assert_eq!(href("a b:c"), "./a%20b:c");
        assert_eq!(href("x(1)!.log"), "x%281%29%21.log");
        assert_eq!(html_escape("<'&\">"), "&lt;&#39;&amp;&#34;&gt;");
        assert_eq!(percent_decode("a%2Fb%zz%4"), Some("a/b%zz%4".into()));
    }
}
