//! The one way the CLI runs independent jobs (policies, sweep windows) on several threads.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f(0)`, …, `f(jobs - 1)` on up to `threads` scoped threads, each idle thread taking the next
/// job; the results come back in job order, whatever order the jobs finished in.
pub(crate) fn parallel_map<T: Send>(jobs: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<T>>> = Mutex::new((0..jobs).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, jobs.max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs {
                        break;
                    }
                    let r = f(i);
                    out.lock().expect("no panics while holding the lock")[i] = Some(r);
                }
            });
        }
    });
    out.into_inner().expect("threads joined").into_iter().map(|r| r.expect("every job ran")).collect()
}

#[cfg(test)]
mod tests {
    use super::parallel_map;

    #[test]
    fn results_come_back_in_job_order_on_any_number_of_threads() {
        for threads in [1, 2, 7] {
            assert_eq!(parallel_map(5, threads, |i| i * i), [0, 1, 4, 9, 16]);
        }
        assert!(parallel_map(0, 2, |i| i).is_empty());
    }
}
