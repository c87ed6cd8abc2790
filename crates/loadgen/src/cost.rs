//! What the server spent: CPU time and peak RSS from /proc, bytes on disk.

use std::{fs, path::Path};

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
