//! A token bucket that takes `now`: the pure rate limiter inside the agent's data mover.
//!
//! Tokens (bytes) accrue at `rate` up to `burst`. A sender asks for a chunk; the bucket either
//! grants it or says how long until it could. It never sleeps or reads a clock itself, so the
//! async sender is a thin shell around it and tests run it in simulated time.

use coflow_core::Nanos;

/// Bytes per second with a bounded burst.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Nanos,
}

/// The answer to a request for tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// Send now.
    Now,
    /// Ask again after this long.
    Wait(Nanos),
    /// The rate is zero: wait for it to change.
    Paused,
}

impl TokenBucket {
    /// A bucket at `rate` bytes per second holding at most `burst` bytes, empty at `now`.
    pub fn new(rate: f64, burst: f64, now: Nanos) -> TokenBucket {
        assert!(rate >= 0.0 && burst > 0.0, "invalid bucket {rate} {burst}");
        TokenBucket { rate, burst, tokens: 0.0, last: now }
    }

    /// The current rate.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, now: Nanos) {
        let dt = now.saturating_sub(self.last).as_secs_f64();
        self.tokens = (self.tokens + self.rate * dt).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Changes the rate from `now` on; tokens earned at the old rate are kept.
    pub fn set_rate(&mut self, now: Nanos, rate: f64, burst: f64) {
        assert!(rate >= 0.0 && burst > 0.0, "invalid bucket {rate} {burst}");
        self.refill(now);
        self.rate = rate;
        self.burst = burst;
        self.tokens = self.tokens.min(burst);
    }

    /// Adds `bytes` of credit, up to the burst.
    pub fn credit(&mut self, now: Nanos, bytes: f64) {
        self.refill(now);
        self.tokens = (self.tokens + bytes.max(0.0)).min(self.burst);
    }

    /// Asks for `n` bytes at `now` (`n` at most the burst).
    pub fn take(&mut self, now: Nanos, n: u64) -> Grant {
        self.refill(now);
        let n = (n as f64).min(self.burst);
        if self.tokens >= n {
            self.tokens -= n;
            return Grant::Now;
        }
        if self.rate <= 0.0 {
            return Grant::Paused;
        }
        Grant::Wait(Nanos::from_secs_f64((n - self.tokens) / self.rate).max(Nanos(1)))
    }
}

/// The burst a flow or port at `rate` may send at once: enough to cover a chunk and timer
/// overshoot or a scheduling hiccup on a busy machine (50 ms at the rate), so that sending late
/// does not lower the average.
pub fn burst_for(rate: f64, chunk: usize) -> f64 {
    (rate * 0.050).max(chunk as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_at_the_rate_over_time() {
        let mut b = TokenBucket::new(1_000_000.0, 20_000.0, Nanos::ZERO);
        let mut now = Nanos::ZERO;
        let mut sent = 0u64;
        while now < Nanos::from_secs(2) {
            match b.take(now, 10_000) {
                Grant::Now => sent += 10_000,
                // Sleep a millisecond late each time; the burst absorbs it.
                Grant::Wait(d) => now = now + d + Nanos::from_millis(1),
                Grant::Paused => unreachable!(),
            }
        }
        let rate = sent as f64 / 2.0;
        assert!((rate - 1_000_000.0).abs() < 20_000.0, "{rate}");
    }

    #[test]
    fn zero_rate_pauses_and_a_new_rate_resumes() {
        let mut b = TokenBucket::new(0.0, 1000.0, Nanos::ZERO);
        assert_eq!(b.take(Nanos::from_secs(5), 100), Grant::Paused);
        b.set_rate(Nanos::from_secs(5), 1000.0, 1000.0);
        assert_eq!(b.take(Nanos::from_secs(5), 100), Grant::Wait(Nanos::from_millis(100)));
        assert_eq!(b.take(Nanos::from_millis(5100), 100), Grant::Now);
    }
}
