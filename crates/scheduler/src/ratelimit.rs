//! Client-side rate limiting of API writes (client-go's token bucket:
//! `--kube-api-qps` tokens per second, up to `--kube-api-burst` at once), so
//! rkube puts the same load on the API server kube-scheduler would.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// A token bucket. Non-positive QPS means no limit.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A full bucket.
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
            Some(Duration::from_secs_f64((1.0 - *tokens) / self.qps))
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        loop {
            let wait = {
                let mut b = self.bucket.lock().await;
                match self.take(&mut b, Instant::now()) {
                    None => return,
                    Some(w) => w,
                }
            };
            tokio::time::sleep(wait).await;
        }
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
}
