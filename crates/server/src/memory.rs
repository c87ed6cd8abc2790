//! The process's memory against `--max-memory`.
//!
//! The memory budget (`tracedb_lsm::budget`) counts request bodies and
//! buffered spans and decides admission; everything else the process holds
//! (flush and compaction working memory, cached index summaries, thread
//! stacks, the allocator's free pages it has not given back) it learns from
//! here: [`Governor::sample`] reads the resident anonymous memory (`RssAnon`
//! in `/proc/self/status`; file pages of mapped sorted files are page cache
//! the kernel can drop, and are not counted), and the sampler hands it to the
//! budget, which narrows admission to what the limit leaves. The governor
//! measures and trims; it admits nothing.
//!
//! glibc keeps freed memory in its heaps for reuse and returns little of it:
//! request bodies of a few hundred KiB, freed by the thousand after each
//! flush, stay resident. When resident memory passes three quarters of the
//! limit, the governor asks glibc to return its free pages (`malloc_trim`),
//! at most once a second: a trim walks every arena, locking each in turn, for
//! 5 to 50 ms at a 1 GiB heap. Below that mark, trims never run, so a server
//! with room to spare pays nothing.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Mutex,
    },
    time::{Duration, Instant},
};

/// Least time between two trims.
const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Samples the process's memory and returns freed memory to the system.
#[derive(Debug)]
pub struct Governor {
    limit: usize,
    last_trim: Mutex<Option<Instant>>,
    trims: AtomicU64,
    trim_nanos: AtomicU64,
}

impl Governor {
    /// A governor for a process limited to `limit` bytes.
    pub fn new(limit: usize) -> Governor {
        Governor {
            limit,
            last_trim: Mutex::new(None),
            trims: AtomicU64::new(0),
            trim_nanos: AtomicU64::new(0),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Trims run so far.
    pub fn trims(&self) -> u64 {
        self.trims.load(Ordering::Relaxed)
    }

    /// Time spent trimming so far.
    pub fn trim_time(&self) -> Duration {
        Duration::from_nanos(self.trim_nanos.load(Ordering::Relaxed))
    }

    /// The resident anonymous memory, after returning free memory to the
    /// system if it is over three quarters of the limit and no trim ran in the
    /// last second. `None` where `/proc/self/status` cannot be read.
    pub fn sample(&self) -> Option<usize> {
        let resident = resident_anon_bytes()?;
        if resident <= self.limit - self.limit / 4 {
            return Some(resident);
        }
        {
            let mut last = self.last_trim.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|t| t.elapsed() < TRIM_EVERY) {
                return Some(resident);
            }
            *last = Some(Instant::now());
        }
        let started = Instant::now();
        if !release_free_memory() {
            return Some(resident);
        }
        let took = started.elapsed();
        self.trims.fetch_add(1, Ordering::Relaxed);
        self.trim_nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        tracing::debug!(
            before = resident,
            took_us = took.as_micros() as u64,
            "memory over three quarters of --max-memory: returned free memory to the system"
        );
        resident_anon_bytes().or(Some(resident))
    }
}

/// `RssAnon` of `/proc/self/status`, in bytes.
pub fn resident_anon_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_rss_anon(&status)
}

fn parse_rss_anon(status: &str) -> Option<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("RssAnon:"))?;
    let kib: usize = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// Asks the allocator to return free memory to the system; false where
/// there is no such call (another C library).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn release_free_memory() -> bool {
    // SAFETY: malloc_trim takes no pointers and only locks glibc's own
    // arenas; any thread may call it at any time.
    unsafe { libc::malloc_trim(0) };
    true
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_anon_in_bytes() {
        let status =
            "Name:\ttracedb\nVmRSS:\t  2048 kB\nRssAnon:\t    1536 kB\nRssFile:\t 512 kB\n";
        assert_eq!(parse_rss_anon(status), Some(1536 * 1024));
        assert_eq!(parse_rss_anon("VmRSS:\t 1 kB\n"), None);
        assert_eq!(parse_rss_anon("RssAnon:\t lots kB\n"), None);
    }

    #[test]
    fn memory_the_process_touches_shows_in_the_sample() {
        let before = resident_anon_bytes().expect("linux");
        let block = vec![1u8; 64 << 20];
        let after = resident_anon_bytes().expect("linux");
        assert!(
            after >= before + (48 << 20),
            "64 MiB touched, resident {before} -> {after}"
        );
        assert_eq!(
            block.iter().map(|&b| usize::from(b)).sum::<usize>(),
            64 << 20
        );
    }

    #[test]
    fn trims_only_over_three_quarters_and_at_most_once_a_second() {
        let roomy = Governor::new(usize::MAX / 2);
        assert!(roomy.sample().is_some());
        assert_eq!(roomy.trims(), 0, "far below the limit");
        let tight = Governor::new(4096);
        tight.sample();
        tight.sample();
        let expected = u64::from(cfg!(all(target_os = "linux", target_env = "gnu")));
        assert_eq!(tight.trims(), expected, "one trim in the first second");
    }
}
