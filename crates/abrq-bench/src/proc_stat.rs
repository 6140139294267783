//! CPU time from `/proc`: of one process, of every process of a name, and
//! of the whole machine.

/// Clock ticks per second of `/proc/PID/stat`'s times.
pub(crate) fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User + system ticks of a process so far.
pub(crate) fn cpu_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name, which may hold spaces
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here
    ticks(11) + ticks(12)
}

/// User + system ticks of every process named `comm`, by pid.
pub(crate) fn ticks_of(comm: &str) -> std::collections::HashMap<u32, f64> {
    let want = format!("({comm})");
    let mut out = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if stat.split_whitespace().nth(1) == Some(want.as_str()) {
            out.insert(pid, cpu_of(pid));
        }
    }
    out
}

/// (busy, total) jiffies of all CPUs since boot, from `/proc/stat`.
pub(crate) fn cpu_ticks() -> anyhow::Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().unwrap_or_default();
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|t| t.parse().ok())
        .collect();
    anyhow::ensure!(ticks.len() >= 5, "unexpected /proc/stat: {line}");
    let total: u64 = ticks.iter().sum();
    // idle and iowait
    Ok((total - ticks[3] - ticks[4], total))
}

pub(crate) fn busy_share(before: (u64, u64), after: (u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1).max(1);
    after.0.saturating_sub(before.0) as f64 / total as f64
}

/// The ticks processes named `comm` used since `before` (`ticks_of`), new
/// processes counted from their start.
pub(crate) fn ticks_since(comm: &str, before: &std::collections::HashMap<u32, f64>) -> f64 {
    ticks_of(comm)
        .iter()
        .map(|(pid, t)| t - before.get(pid).copied().unwrap_or(0.0))
        .sum()
}
