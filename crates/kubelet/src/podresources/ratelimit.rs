//! Upstream's rate limit of the pod-resources API
//! (`pkg/kubelet/apis/grpc/ratelimit.go` with the values of
//! `pkg/kubelet/apis/podresources/constants.go`): one token bucket for the
//! whole server, refilled at [`DEFAULT_QPS`] tokens a second up to
//! [`DEFAULT_BURST_TOKENS`], starting full; a call that finds no token is
//! refused at once (never queued) with `ResourceExhausted` and
//! [`LIMIT_EXCEEDED`].
//!
//! [`TokenBucket`] is `golang.org/x/time/rate`'s `Limiter.Allow` in integer
//! nanoseconds and takes the time from its caller (deterministic to test);
//! [`RateLimit`] is the tonic interceptor that shares one bucket between
//! every connection.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Calls a second the bucket refills (upstream's `DefaultQPS`).
pub const DEFAULT_QPS: u32 = 100;
/// Calls allowed at once, and the bucket's size (upstream's
/// `DefaultBurstTokens`).
pub const DEFAULT_BURST_TOKENS: u32 = 10;
/// The message of a refused call (gRPC code `ResourceExhausted`).
pub const LIMIT_EXCEEDED: &str = "rejected by rate limit";

/// A token bucket holding up to `burst` tokens, one added every
/// `1 s / qps`; the stored amount is kept in nanoseconds of refill time, so
/// it is exact for every `qps` dividing 10⁹ (100 gives 10 ms a token).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Refill time of one token.
    interval_ns: u64,
    /// Refill time of a full bucket (`burst` tokens).
    capacity_ns: u64,
    /// Refill time stored, at `last`.
    stored_ns: u64,
    /// When `stored_ns` was computed; `None`: never (the bucket is full).
    last: Option<Instant>,
    /// False for `qps == 0`: the first `burst` calls pass, then none.
    refills: bool,
}

impl TokenBucket {
    /// A full bucket. `qps == 0` never refills; `burst == 0` allows nothing.
    pub fn new(qps: u32, burst: u32) -> Self {
        let second = Duration::from_secs(1).as_nanos() as u64;
        let interval_ns = second / u64::from(qps.max(1));
        let capacity_ns = interval_ns.saturating_mul(u64::from(burst));
        TokenBucket {
            interval_ns,
            capacity_ns,
            stored_ns: capacity_ns,
            last: None,
            refills: qps > 0,
        }
    }

    /// Takes a token at `now` if there is one (upstream's `Allow`).
    pub fn allow(&mut self, now: Instant) -> bool {
        if let (Some(last), true) = (self.last, self.refills) {
            let elapsed =
                u64::try_from(now.saturating_duration_since(last).as_nanos()).unwrap_or(u64::MAX);
            self.stored_ns = self.stored_ns.saturating_add(elapsed).min(self.capacity_ns);
        }
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        if self.capacity_ns > 0 && self.stored_ns >= self.interval_ns {
            self.stored_ns -= self.interval_ns;
            true
        } else {
            false
        }
    }
}

/// The tonic interceptor in front of every call of the service: one bucket
/// shared by all connections (clones share it).
#[derive(Debug, Clone)]
pub struct RateLimit(Arc<Mutex<TokenBucket>>);

impl RateLimit {
    /// A limit of `qps` calls a second with bursts of `burst`.
    pub fn new(qps: u32, burst: u32) -> Self {
        RateLimit(Arc::new(Mutex::new(TokenBucket::new(qps, burst))))
    }

    /// Whether a call arriving now may proceed.
    pub fn allow(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allow(Instant::now())
    }
}

impl Default for RateLimit {
    /// Upstream's limit: [`DEFAULT_QPS`], [`DEFAULT_BURST_TOKENS`].
    fn default() -> Self {
        RateLimit::new(DEFAULT_QPS, DEFAULT_BURST_TOKENS)
    }
}

impl tonic::service::Interceptor for RateLimit {
    fn call(&mut self, req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if self.allow() {
            Ok(req)
        } else {
            Err(tonic::Status::resource_exhausted(LIMIT_EXCEEDED))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn starts_full_then_refuses_the_burst_plus_one() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(DEFAULT_QPS, DEFAULT_BURST_TOKENS);
        for i in 0..DEFAULT_BURST_TOKENS {
            assert!(b.allow(t0), "call {i} of the burst");
        }
        assert!(!b.allow(t0), "burst + 1");
        assert!(!b.allow(t0 + ms(9)), "no whole token after 9 ms");
        assert!(b.allow(t0 + ms(10)), "one token every 10 ms at 100 QPS");
        assert!(!b.allow(t0 + ms(10)));
    }

    #[test]
    fn refills_at_qps_up_to_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(DEFAULT_QPS, DEFAULT_BURST_TOKENS);
        for _ in 0..10 {
            assert!(b.allow(t0));
        }
        // 35 ms later: 3 tokens (and 5 ms towards the next).
        let t1 = t0 + ms(35);
        assert_eq!((0..5).filter(|_| b.allow(t1)).count(), 3);
        assert!(b.allow(t1 + ms(5)), "the 5 ms carried over");
        // A long pause refills to the burst, no more.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| b.allow(t2)).count(), 10);
    }

    #[test]
    fn a_steady_100_qps_is_never_refused() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(DEFAULT_QPS, DEFAULT_BURST_TOKENS);
        assert!((0..1000).all(|i| b.allow(t0 + ms(10 * i))));
    }

    #[test]
    fn degenerate_limits() {
        let t0 = Instant::now();
        let mut none = TokenBucket::new(100, 0);
        assert!(!none.allow(t0) && !none.allow(t0 + Duration::from_secs(5)));
        let mut once = TokenBucket::new(0, 2);
        assert!(once.allow(t0) && once.allow(t0));
        assert!(!once.allow(t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn the_interceptor_refuses_with_upstreams_status() {
        use tonic::service::Interceptor;
        let mut limit = RateLimit::new(1, 1);
        let mut other = limit.clone();
        assert!(limit.call(tonic::Request::new(())).is_ok());
        let err = other.call(tonic::Request::new(())).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert_eq!(err.message(), "rejected by rate limit");
    }
}
