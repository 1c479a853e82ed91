//! The number of cores this process may use, read once.
//!
//! `std::thread::available_parallelism` reads the cgroup files (`/proc/self/cgroup`,
//! `mountinfo`, `cpu.max`) at every call: asked per query, that was a third of a one-series
//! range query's time. A container's CPU quota does not change under a running process often
//! enough to matter here.

use std::sync::OnceLock;

/// Cores available to the process (at least 1), as first measured.
pub fn available() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}

#[cfg(test)]
mod tests {
    #[test]
    fn at_least_one_and_stable() {
        let n = super::available();
        assert!(n >= 1);
        assert_eq!(super::available(), n);
    }
}
