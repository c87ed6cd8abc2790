//! What the server spent: CPU time and peak RSS from /proc, bytes on disk.

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

/// CPU seconds (user + system) and peak RSS of a process, read from /proc.
#[derive(Debug, Clone, Copy)]
pub struct ProcSample {
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
}

/// Reads /proc/PID/stat and /proc/PID/status.
pub fn sample(pid: u32) -> anyhow::Result<ProcSample> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name is in parentheses and may contain spaces; fields follow the last ')'.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("bad /proc stat"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    let peak_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok(ProcSample {
        cpu_seconds: ticks as f64 / clock_ticks() as f64,
        peak_rss_bytes: peak_kb * 1024,
    })
}

fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100)
}

/// Whether a process has gone quiet, judged from its CPU time sampled at a
/// fixed interval: quiet once it grew by less than `quiet_cpu` seconds in
/// each of `intervals` intervals in a row.
#[derive(Debug)]
pub struct Quiet {
    quiet_cpu: f64,
    intervals: u32,
    last: Option<f64>,
    run: u32,
}

impl Quiet {
    pub fn new(quiet_cpu: f64, intervals: u32) -> Quiet {
        Quiet {
            quiet_cpu,
            intervals: intervals.max(1),
            last: None,
            run: 0,
        }
    }

    /// Takes the next sample of CPU seconds; true once the process is quiet.
    pub fn observe(&mut self, cpu_seconds: f64) -> bool {
        if let Some(last) = self.last {
            if cpu_seconds - last < self.quiet_cpu {
                self.run += 1;
            } else {
                self.run = 0;
            }
        }
        self.last = Some(cpu_seconds);
        self.run >= self.intervals
    }
}

/// Samples `pid` every 10 s until it used less than half a CPU second in
/// each interval for `quiet_secs` in a row (rounded up to whole intervals, at
/// least one; for tracedb: compaction has caught up with what the load left),
/// and returns the last sample and the time waited. Progress goes to stderr.
pub fn wait_until_quiet(pid: u32, quiet_secs: u64) -> anyhow::Result<(ProcSample, Duration)> {
    const INTERVAL: Duration = Duration::from_secs(10);
    let started = Instant::now();
    let intervals = quiet_secs.div_ceil(INTERVAL.as_secs());
    let mut quiet = Quiet::new(0.5, u32::try_from(intervals).unwrap_or(u32::MAX));
    loop {
        let s = sample(pid)?;
        if quiet.observe(s.cpu_seconds) {
            return Ok((s, started.elapsed()));
        }
        eprintln!(
            "  settling: server CPU {:.1} s, {:.0?} waited",
            s.cpu_seconds,
            started.elapsed()
        );
        std::thread::sleep(INTERVAL);
    }
}

/// Total size of the files under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::Quiet;

    #[test]
    fn quiet_only_after_enough_quiet_intervals_in_a_row() {
        let mut q = Quiet::new(0.5, 2);
        // Busy, quiet once, busy again: the run of quiet intervals restarts.
        assert!(!q.observe(10.0));
        assert!(!q.observe(15.0));
        assert!(!q.observe(15.2));
        assert!(!q.observe(20.0));
        assert!(!q.observe(20.1));
        assert!(q.observe(20.3));
        // Exactly the threshold counts as busy.
        let mut q = Quiet::new(0.5, 1);
        assert!(!q.observe(1.0));
        assert!(!q.observe(1.5));
        assert!(q.observe(1.6));
    }
}
