//! A CPU quota per process: a cgroup v1 `cpu` group of its own with
//! `cpu.cfs_quota_us` = cores x `cpu.cfs_period_us`, as a machine of that
//! many cores would give it.

use std::path::PathBuf;

const ROOT: &str = "/sys/fs/cgroup/cpu";
const PERIOD_US: u64 = 100_000;

/// Fails early, naming what is missing, when quotas cannot be set here.
pub(super) fn check(cores: f64) -> anyhow::Result<()> {
    anyhow::ensure!(
        cores > 0.0 && cores <= 64.0,
        "--cpu-cap {cores}: between 0 and 64 cores"
    );
    let probe = CpuCap::group("probe")?;
    std::fs::remove_dir(&probe)?;
    Ok(())
}

/// One process's group, removed on drop (its process must have ended).
pub(super) struct CpuCap {
    dir: PathBuf,
}

impl CpuCap {
    pub(super) fn new(name: &str, cores: f64, pid: u32) -> anyhow::Result<CpuCap> {
        let dir = CpuCap::group(name)?;
        let quota = (cores * PERIOD_US as f64).round() as u64;
        std::fs::write(dir.join("cpu.cfs_period_us"), PERIOD_US.to_string())?;
        std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
        std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        Ok(CpuCap { dir })
    }

    fn group(name: &str) -> anyhow::Result<PathBuf> {
        let dir = PathBuf::from(ROOT).join(format!("abrq-bench-{}-{name}", std::process::id()));
        if !dir.exists() {
            std::fs::create_dir(&dir).map_err(|e| {
                anyhow::anyhow!(
                    "cannot create the cgroup {} (--cpu-cap needs a writable cgroup v1 cpu controller): {e}",
                    dir.display()
                )
            })?;
        }
        Ok(dir)
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        // a group still holding a process cannot go; say so, leave it
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cannot remove the cgroup {}: {e}", self.dir.display());
        }
    }
}
