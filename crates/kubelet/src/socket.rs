//! The Unix sockets the kubelet serves gRPC on (upstream's `CreateListener`
//! of `k8s.io/cri-client/pkg/util`): the pod-resources API and the device
//! plugins' registration, each behind [`local_authority`].
//!
//! The directory is created `0750` if missing, a stale socket (or any file)
//! at the path is unlinked, and the new socket is bound under a temporary
//! name and renamed into place, so a client never sees a half-made one (a
//! watcher sees it created whole). Its mode is what `bind` gives without
//! group and world write bits (upstream leaves it to the umask: `0755`
//! under the usual `022`); only its owner (root) can connect.

use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

/// Listens on `socket`, as above.
pub fn listen(socket: &Path) -> io::Result<UnixListener> {
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("unlinking it: {e}"))),
    }
    let dir = match socket.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = socket
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp)?;
    let placed = (|| {
        let mode = std::fs::metadata(&tmp)?.permissions().mode() & 0o777 & !0o022;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, socket)
    })();
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// Serves the gRPC `service` on `listener` (the socket `path`, named
/// `what` in the logs) in a task of its own, each connection through
/// [`local_authority`] (clients may dial the socket by its path).
pub fn serve<S, B>(
    listener: UnixListener,
    service: S,
    path: &Path,
    what: &'static str,
) -> tokio::task::JoinHandle<()>
where
    S: tonic::codegen::Service<
            tonic::codegen::http::Request<tonic::body::Body>,
            Response = tonic::codegen::http::Response<B>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<tonic::codegen::StdError> + Send,
    B: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    let incoming = futures::StreamExt::map(
        tokio_stream::wrappers::UnixListenerStream::new(listener),
        |conn| conn.map(local_authority),
    );
    let endpoint = path.display().to_string();
    tracing::info!(%endpoint, "serving {what}");
    tokio::spawn(async move {
        if let Err(e) = tonic::transport::Server::builder()
            .serve_with_incoming(service, incoming)
            .await
        {
            tracing::error!(%endpoint, error = %e, "serving {what}");
        }
    })
}

/// grpc-go clients that dial a socket by its path (as device plugins dial
/// the kubelet's) send the path, percent-encoded, as the HTTP/2
/// `:authority`, which h2's server (under tonic) refuses with
/// `PROTOCOL_ERROR` before any handler runs. This relay sits between such
/// a connection and the server: it passes every frame through, except that
/// it rewrites header blocks whose `:authority` is not a valid URI
/// authority to `localhost` (what grpc-go itself sends for `unix://`
/// targets). The server's answers pass untouched.
pub fn local_authority(client: tokio::net::UnixStream) -> tokio::io::DuplexStream {
    use tokio::io::AsyncWriteExt;
    let (server_side, relay_side) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let (mut from_client, mut to_client) = client.into_split();
        let (mut from_server, mut to_server) = tokio::io::split(relay_side);
        // Each side's end reaches the other (the server sees the client
        // go, and the client the server), so the task ends with the
        // connection.
        let up = async {
            let _ = relay_requests(&mut from_client, &mut to_server).await;
            let _ = to_server.shutdown().await;
        };
        let down = async {
            let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            let _ = to_client.shutdown().await;
        };
        tokio::join!(up, down);
    });
    server_side
}

/// The HTTP/2 connection preface a client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The largest frame and header block the relay holds (h2's default
/// `SETTINGS_MAX_FRAME_SIZE` is 16 KiB; a request's headers are far
/// smaller).
const MAX_BLOCK: usize = 1 << 20;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
const MAX_FRAME: usize = 16 * 1024;
/// The HPACK dynamic table a client may ask for (HTTP/2's default
/// `SETTINGS_HEADER_TABLE_SIZE`, which h2's server advertises).
const MAX_TABLE: usize = 4096;
/// The most header bytes one block may decode to (indexed fields repeat
/// table entries: a small block can name megabytes).
const MAX_DECODED: usize = 64 * 1024;

async fn relay_requests<R, W>(r: &mut R, w: &mut W) -> io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut preface = [0u8; 24];
    r.read_exact(&mut preface).await?;
    w.write_all(&preface).await?;
    if preface != PREFACE {
        // Not HTTP/2: the server says so.
        tokio::io::copy(r, w).await?;
        return Ok(());
    }
    let mut decoder = loona_hpack::Decoder::new();
    decoder.set_max_allowed_table_size(MAX_TABLE);
    let mut encoder = loona_hpack::Encoder::new();
    loop {
        let (kind, flags, stream, payload) = read_frame(r).await?;
        if kind != HEADERS {
            w.write_all(&frame_header(payload.len(), kind, flags, stream))
                .await?;
            w.write_all(&payload).await?;
            continue;
        }
        let mut body = &payload[..];
        if flags & PADDED != 0 {
            let pad = usize::from(*body.first().ok_or_else(|| bad("empty padded HEADERS"))?);
            if pad + 1 > body.len() {
                return Err(bad("padding longer than the frame"));
            }
            body = &body[1..body.len() - pad];
        }
        let mut priority = Vec::new();
        if flags & PRIORITY != 0 {
            if body.len() < 5 {
                return Err(bad("short priority"));
            }
            priority = body[..5].to_vec();
            body = &body[5..];
        }
        let mut block = body.to_vec();
        let mut end = flags & END_HEADERS != 0;
        while !end {
            let (kind, f, s, more) = read_frame(r).await?;
            if kind != CONTINUATION || s != stream || block.len() + more.len() > MAX_BLOCK {
                return Err(bad("header block not continued"));
            }
            block.extend_from_slice(&more);
            end = f & END_HEADERS != 0;
        }
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut decoded = 0usize;
        decoder
            .decode_with_cb(&block, |n, v| {
                decoded += n.len() + v.len();
                if decoded <= MAX_DECODED {
                    headers.push((n.into_owned(), v.into_owned()));
                }
            })
            .map_err(|e| bad(&format!("HPACK: {e:?}")))?;
        if decoded > MAX_DECODED {
            return Err(bad("header block too large"));
        }
        for (name, value) in headers.iter_mut() {
            if name.as_slice() == b":authority" && !plain_authority(value.as_slice()) {
                *value = b"localhost".to_vec();
            }
        }
        let encoded = encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let mut first = priority;
        let room = MAX_FRAME - first.len();
        let split = encoded.len().min(room);
        first.extend_from_slice(&encoded[..split]);
        let rest: Vec<&[u8]> = encoded[split..].chunks(MAX_FRAME).collect();
        let mut f = flags & (END_STREAM | PRIORITY);
        if rest.is_empty() {
            f |= END_HEADERS;
        }
        w.write_all(&frame_header(first.len(), HEADERS, f, stream))
            .await?;
        w.write_all(&first).await?;
        for (i, chunk) in rest.iter().enumerate() {
            let f = if i + 1 == rest.len() { END_HEADERS } else { 0 };
            w.write_all(&frame_header(chunk.len(), CONTINUATION, f, stream))
                .await?;
            w.write_all(chunk).await?;
        }
    }
}

/// Whether h2 takes `v` as an authority: host characters and a port, no
/// path and no percent-encoding.
fn plain_authority(v: &[u8]) -> bool {
    !v.is_empty()
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~:[]@!$&'()*+,;=".contains(b))
}

fn bad(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

async fn read_frame<R>(r: &mut R) -> io::Result<(u8, u8, u32, Vec<u8>)>
where
    R: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut h = [0u8; 9];
    r.read_exact(&mut h).await?;
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    if len > MAX_BLOCK {
        return Err(bad("frame too large"));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    Ok((h[3], h[4], stream, payload))
}

fn frame_header(len: usize, kind: u8, flags: u8, stream: u32) -> [u8; 9] {
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    [l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_h2_refuses_are_recognised() {
        assert!(plain_authority(b"localhost"));
        assert!(plain_authority(b"127.0.0.1:80"));
        assert!(!plain_authority(
            b"%2Fvar%2Flib%2Fkubelet%2Fdevice-plugins%2Fkubelet.sock"
        ));
        assert!(!plain_authority(
            b"/var/lib/kubelet/device-plugins/kubelet.sock"
        ));
        assert!(!plain_authority(b""));
    }

    #[tokio::test]
    async fn a_block_naming_megabytes_through_the_table_is_refused() {
        let big = vec![b'x'; 4000];
        let mut enc = loona_hpack::Encoder::new();
        let fields: Vec<(&[u8], &[u8])> = (0..20).map(|_| (&b"x-big"[..], &big[..])).collect();
        let block = enc.encode(fields);
        assert!(block.len() < 4200, "later fields are table references");
        let mut input = PREFACE.to_vec();
        input.extend_from_slice(&frame_header(block.len(), HEADERS, END_HEADERS, 1));
        input.extend_from_slice(&block);
        let mut out = Vec::new();
        let e = relay_requests(&mut &input[..], &mut out).await.unwrap_err();
        assert_eq!(e.to_string(), "header block too large");
        assert_eq!(out, PREFACE, "nothing of it reaches the server");
    }

    #[tokio::test]
    async fn a_path_authority_becomes_localhost_and_other_frames_pass() {
        let mut enc = loona_hpack::Encoder::new();
        let block = enc.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":authority", b"%2Fvar%2Flib%2Fkubelet.sock"),
            (b":path", b"/v1beta1.Registration/Register"),
        ]);
        let mut input = PREFACE.to_vec();
        // HEADERS split over a CONTINUATION, then a DATA frame.
        let (a, b) = block.split_at(block.len() / 2);
        input.extend_from_slice(&frame_header(a.len(), HEADERS, END_STREAM, 1));
        input.extend_from_slice(a);
        input.extend_from_slice(&frame_header(b.len(), CONTINUATION, END_HEADERS, 1));
        input.extend_from_slice(b);
        input.extend_from_slice(&frame_header(3, 0x0, 0, 1));
        input.extend_from_slice(b"abc");
        let mut out = Vec::new();
        let _ = relay_requests(&mut &input[..], &mut out).await;
        assert_eq!(&out[..24], PREFACE);
        let mut rest = &out[24..];
        let (kind, flags, stream, payload) = read_frame(&mut rest).await.unwrap();
        assert_eq!(
            (kind, flags, stream),
            (HEADERS, END_STREAM | END_HEADERS, 1)
        );
        let headers = loona_hpack::Decoder::new().decode(&payload).unwrap();
        assert_eq!(headers[1], (b":authority".to_vec(), b"localhost".to_vec()));
        assert_eq!(headers[2].1, b"/v1beta1.Registration/Register".to_vec());
        let (kind, _, _, payload) = read_frame(&mut rest).await.unwrap();
        assert_eq!((kind, payload.as_slice()), (0x0, &b"abc"[..]));
    }
}
