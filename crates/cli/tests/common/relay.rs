//! A TCP relay that delays every byte by a fixed time in each direction:
//! latency on a link, for tests (this kernel has no `tc netem`). Bytes keep
//! their order; a connection's two directions run on their own threads, a
//! reader stamping each chunk with the time it may leave and a writer
//! holding it until then. Stopped on drop.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub struct Relay {
    /// Where the relay listens.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Listens on `listen` (port 0: any) and relays each connection to
    /// `target`, `delay` later in each direction.
    pub fn start(listen: &str, target: SocketAddr, delay: Duration) -> Relay {
        let listener = TcpListener::bind(listen).expect("relay listens");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(client, server, delay);
                pump(s2, c2, delay);
            }
        });
        Relay { addr, stop }
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        // Dropping tx ends the writer once it has sent everything.
    });
    std::thread::spawn(move || {
        for (at, bytes) in rx {
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}
