//! Client-side rate limiting (client-go's token bucket: QPS tokens per
//! second, up to a burst at once), so rkube puts the load on the API server
//! (and the registries) that kube-scheduler and the kubelet would: the
//! scheduler's writes, every request of a kubelet client ([`Limited`]),
//! the kubelet's image pulls ([`RateLimiter::try_acquire`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The longest single wait for a token (a QPS so small that the next
/// token is further away is waited for in steps of this).
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// A token bucket. Non-positive QPS means no limit.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A full bucket of `burst` tokens filled at `qps` a second.
    pub fn new(qps: f32, burst: i32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps: f64::from(qps),
            burst,
            bucket: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long to wait for a token at `now` (taking it when there is one).
    fn take(&self, bucket: &mut (f64, Instant), now: Instant) -> Option<Duration> {
        let (tokens, last) = bucket;
        *tokens = (*tokens + now.saturating_duration_since(*last).as_secs_f64() * self.qps)
            .min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            None
        } else {
            // (Capped: a tiny QPS would overflow a Duration.)
            Some(
                Duration::try_from_secs_f64((1.0 - *tokens) / self.qps)
                    .unwrap_or(Duration::MAX)
                    .min(MAX_WAIT),
            )
        }
    }

    fn bucket(&self) -> std::sync::MutexGuard<'_, (f64, Instant)> {
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        loop {
            let wait = match self.take(&mut self.bucket(), Instant::now()) {
                None => return,
                Some(w) => w,
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Takes a token if there is one now (client-go's `TryAccept`).
    pub fn try_acquire(&self) -> bool {
        self.qps <= 0.0 || self.take(&mut self.bucket(), Instant::now()).is_none()
    }
}

/// A tower layer that waits for a token of its limiter before each request
/// (client-go's rate limiter of a REST client).
#[derive(Clone)]
pub struct LimitLayer(pub Arc<RateLimiter>);

impl<S> tower::Layer<S> for LimitLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            limiter: self.0.clone(),
            waiting: None,
            permit: false,
        }
    }
}

/// A service behind a [`LimitLayer`]: ready once it holds a token (taken
/// in `poll_ready`, as tower's own rate limit does) and its inner service
/// is ready.
pub struct Limited<S> {
    inner: S,
    limiter: Arc<RateLimiter>,
    /// Waiting for a token.
    waiting: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// A token is held for the next call.
    permit: bool,
}

impl<S: Clone> Clone for Limited<S> {
    fn clone(&self) -> Self {
        Limited {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            waiting: None,
            permit: false,
        }
    }
}

impl<S, R> tower::Service<R> for Limited<S>
where
    S: tower::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.permit {
            let limiter = &self.limiter;
            let waiting = self.waiting.get_or_insert_with(|| {
                let l = limiter.clone();
                Box::pin(async move { l.acquire().await })
            });
            if waiting.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.waiting = None;
            self.permit = true;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.permit = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let rl = RateLimiter::new(10.0, 3);
        let t0 = Instant::now();
        let mut b = (3.0, t0);
        for _ in 0..3 {
            assert_eq!(rl.take(&mut b, t0), None);
        }
        let w = rl.take(&mut b, t0).unwrap();
        assert!((w.as_secs_f64() - 0.1).abs() < 1e-9, "{w:?}");
        // 100 ms later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(rl.take(&mut b, t1), None);
        assert!(rl.take(&mut b, t1).is_some());
        // Never more than the burst, however long idle.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(rl.take(&mut b, t2), None);
        }
        assert!(rl.take(&mut b, t2).is_some());
    }

    #[test]
    fn try_acquire_never_waits() {
        let rl = RateLimiter::new(0.001, 2);
        assert!(rl.try_acquire() && rl.try_acquire());
        assert!(!rl.try_acquire(), "the burst is spent");
        let unlimited = RateLimiter::new(0.0, 1);
        assert!((0..100).all(|_| unlimited.try_acquire()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_spaces_requests() {
        use tower::{Service, ServiceExt};
        let limiter = Arc::new(RateLimiter::new(10.0, 2));
        let mut svc = tower::ServiceBuilder::new()
            .layer(LimitLayer(limiter))
            .service_fn(|_: ()| async { Ok::<_, std::convert::Infallible>(Instant::now()) });
        let t0 = Instant::now();
        let mut at = Vec::new();
        for _ in 0..4 {
            at.push(svc.ready().await.unwrap().call(()).await.unwrap() - t0);
        }
        assert!(
            at[1] < Duration::from_millis(1),
            "the burst at once: {at:?}"
        );
        assert!(
            at[2] >= Duration::from_millis(99) && at[3] >= Duration::from_millis(199),
            "{at:?}"
        );
    }

    #[test]
    fn a_tiny_rate_waits_without_overflow() {
        let rl = RateLimiter::new(1e-30, 1);
        let t0 = Instant::now();
        let mut b = (0.0, t0);
        assert_eq!(rl.take(&mut b, t0), Some(MAX_WAIT));
    }
}
