//! The verdict cache in front of TokenReview and SubjectAccessReview, as
//! upstream's delegating authenticator and authorizer keep one:
//!
//! * a verdict is kept for one TTL if it allowed (the token authenticated,
//!   the access was allowed) and another if it denied; a failed review
//!   (the API server could not be asked) is not kept;
//! * concurrent lookups of the same key share one review (upstream's
//!   singleflight), so a burst of requests with one token costs one
//!   TokenReview;
//! * keys are HMAC-SHA-256 digests under a per-process random key: the
//!   cache holds no bearer token, and every key is 32 bytes however long
//!   the token;
//! * at most `capacity` entries: past it, expired entries go first, then
//!   the ones closest to expiry (pending lookups count as expiring now),
//!   so a flood of distinct hostile tokens cannot grow memory without
//!   bound nor push out the verdicts already earned.
//!
//! Time is tokio's ([`tokio::time::Instant`]), so tests can pause it.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ring::hmac;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// How long verdicts are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    /// For a verdict that allowed.
    pub allowed: Duration,
    /// For a verdict that denied.
    pub denied: Duration,
}

impl Ttl {
    /// The same TTL for both verdicts.
    pub const fn both(d: Duration) -> Ttl {
        Ttl {
            allowed: d,
            denied: d,
        }
    }
}

/// Entries a cache holds at most by default (upstream's authorization
/// cache size).
pub const DEFAULT_CAPACITY: usize = 1024;

type Key = [u8; 32];

struct Slot<V> {
    /// The verdict and when it expires, once reviewed.
    verdict: OnceCell<(V, Instant)>,
}

/// A bounded TTL cache of review verdicts (see the module docs).
pub struct Cache<V> {
    ttl: Ttl,
    capacity: usize,
    key: hmac::Key,
    entries: Mutex<HashMap<Key, Arc<Slot<V>>>>,
}

impl<V: Clone> Cache<V> {
    /// A cache keeping verdicts for `ttl`, at most `capacity` of them.
    pub fn new(ttl: Ttl, capacity: usize) -> Cache<V> {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .unwrap_or_else(|_| hmac::Key::new(hmac::HMAC_SHA256, &process_entropy()));
        Cache {
            ttl,
            capacity: capacity.max(1),
            key,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// How many entries are held (pending lookups included).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Holds nothing?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Slot<V>>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn digest(&self, parts: &[&[u8]]) -> Key {
        let mut ctx = hmac::Context::with_key(&self.key);
        for p in parts {
            // length-prefixed, so ("ab","c") and ("a","bc") differ
            ctx.update(&(p.len() as u64).to_le_bytes());
            ctx.update(p);
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.sign().as_ref());
        out
    }

    /// The cached verdict for `parts`, or the one `review` gives (kept
    /// for `ttl.allowed` when `allowed(&verdict)`, else `ttl.denied`).
    /// Concurrent callers with the same key wait for one review; an error
    /// is returned to the caller that reviewed and is not kept (the next
    /// caller reviews again).
    pub async fn get_or_review<E, F, Fut>(
        &self,
        parts: &[&[u8]],
        allowed: impl Fn(&V) -> bool,
        review: F,
    ) -> Result<V, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        if self.ttl.allowed.is_zero() && self.ttl.denied.is_zero() {
            return review().await;
        }
        let key = self.digest(parts);
        let slot = {
            let mut entries = self.lock();
            let now = Instant::now();
            match entries.get(&key) {
                Some(s) if s.verdict.get().is_none_or(|(_, exp)| *exp > now) => s.clone(),
                _ => {
                    entries.remove(&key);
                    if entries.len() >= self.capacity {
                        self.make_room(&mut entries, now);
                    }
                    let s = Arc::new(Slot {
                        verdict: OnceCell::new(),
                    });
                    entries.insert(key, s.clone());
                    s
                }
            }
        };
        let ttl = self.ttl;
        let (v, _) = slot
            .verdict
            .get_or_try_init(|| async {
                let v = review().await?;
                let keep = if allowed(&v) { ttl.allowed } else { ttl.denied };
                Ok((v, Instant::now() + keep))
            })
            .await?;
        Ok(v.clone())
    }

    /// Drops expired entries; if still full, the one expiring first
    /// (pending lookups first of all).
    fn make_room(&self, entries: &mut HashMap<Key, Arc<Slot<V>>>, now: Instant) {
        entries.retain(|_, s| s.verdict.get().is_none_or(|(_, exp)| *exp > now));
        while entries.len() >= self.capacity {
            let victim = entries
                .iter()
                .min_by_key(|(_, s)| s.verdict.get().map_or(now, |(_, exp)| *exp))
                .map(|(k, _)| *k);
            match victim {
                Some(k) => entries.remove(&k),
                None => break,
            };
        }
    }
}

/// A fallback HMAC key when the system RNG fails (it does not on Linux):
/// the process id and the time, so keys still differ between processes.
fn process_entropy() -> Vec<u8> {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut v = t.to_le_bytes().to_vec();
    v.extend(std::process::id().to_le_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn look(cache: &Cache<bool>, key: &str, verdict: bool, calls: &AtomicUsize) -> bool {
        cache
            .get_or_review(
                &[key.as_bytes()],
                |v| *v,
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    Ok::<_, ()>(verdict)
                },
            )
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn verdicts_expire_after_their_own_ttl() {
        let cache = Cache::new(
            Ttl {
                allowed: Duration::from_secs(10),
                denied: Duration::from_secs(2),
            },
            16,
        );
        let calls = AtomicUsize::new(0);
        assert!(look(&cache, "good", true, &calls).await);
        assert!(!look(&cache, "bad", false, &calls).await);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(3)).await;
        look(&cache, "good", true, &calls).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "allowed still cached");
        look(&cache, "bad", false, &calls).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3, "denied expired after 2 s");
        tokio::time::advance(Duration::from_secs(8)).await;
        look(&cache, "good", true, &calls).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            4,
            "allowed expired after 10 s"
        );
    }

    #[tokio::test]
    async fn concurrent_lookups_share_one_review() {
        let cache = Arc::new(Cache::new(Ttl::both(Duration::from_secs(10)), 16));
        let calls = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let (cache, calls) = (cache.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                look(&cache, "same", false, &calls).await
            }));
        }
        for t in tasks {
            assert!(!t.await.unwrap());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn errors_are_not_kept() {
        let cache: Cache<bool> = Cache::new(Ttl::both(Duration::from_secs(10)), 16);
        let calls = AtomicUsize::new(0);
        for _ in 0..3 {
            let r = cache
                .get_or_review(
                    &[b"k"],
                    |v| *v,
                    || async {
                        calls.fetch_add(1, Ordering::SeqCst);
                        Err::<bool, _>("API server unreachable")
                    },
                )
                .await;
            assert!(r.is_err());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn the_size_is_bounded_and_earned_verdicts_survive_a_flood() {
        let cache = Cache::new(
            Ttl {
                allowed: Duration::from_secs(10),
                denied: Duration::from_secs(5),
            },
            8,
        );
        let calls = AtomicUsize::new(0);
        look(&cache, "good", true, &calls).await;
        for i in 0..1000 {
            look(&cache, &format!("hostile-{i}"), false, &calls).await;
            assert!(cache.len() <= 8);
        }
        let before = calls.load(Ordering::SeqCst);
        look(&cache, "good", true, &calls).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            before,
            "the allowed verdict, expiring last, was kept"
        );
    }

    #[test]
    fn keys_are_digests_of_length_prefixed_parts() {
        let cache: Cache<bool> = Cache::new(Ttl::both(Duration::from_secs(1)), 4);
        assert_ne!(cache.digest(&[b"ab", b"c"]), cache.digest(&[b"a", b"bc"]));
        assert_eq!(cache.digest(&[b"t"]), cache.digest(&[b"t"]));
        let other: Cache<bool> = Cache::new(Ttl::both(Duration::from_secs(1)), 4);
        assert_ne!(
            cache.digest(&[b"t"]),
            other.digest(&[b"t"]),
            "per-cache key"
        );
    }
}
