//! A memory cgroup for one measurement or test (cgroup v1's memory controller, or v2's
//! `memory.max`), removed when dropped: what a container's memory limit is, on this machine.
//! Needs root and a memory controller.

use std::path::{Path, PathBuf};

/// A memory cgroup with a limit; processes are moved into it with [`MemoryCgroup::add`].
pub struct MemoryCgroup {
    path: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    /// A new cgroup `<name>-<pid>` limited to `limit_bytes` of memory, swap included where the
    /// kernel accounts it (a process cannot escape to swap). Errors: no memory controller, or
    /// not root (the message says which).
    pub fn new(name: &str, limit_bytes: u64) -> anyhow::Result<MemoryCgroup> {
        let name = format!("{name}-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (path, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(&name), false)
        } else {
            let root = Path::new("/sys/fs/cgroup");
            // The memory controller must be enabled for the root's children.
            let controllers =
                std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
            anyhow::ensure!(
                controllers.split_whitespace().any(|c| c == "memory"),
                "no memory cgroup controller (v1 or v2) is enabled here"
            );
            (root.join(&name), true)
        };
        std::fs::create_dir(&path)
            .map_err(|e| anyhow::anyhow!("mkdir {} (root needed): {e}", path.display()))?;
        let cgroup = MemoryCgroup { path, v2 };
        let limit = limit_bytes.to_string();
        if v2 {
            cgroup.write("memory.max", &limit)?;
            let _ = std::fs::write(cgroup.path.join("memory.swap.max"), "0");
        } else {
            cgroup.write("memory.limit_in_bytes", &limit)?;
            let _ = std::fs::write(cgroup.path.join("memory.memsw.limit_in_bytes"), &limit);
        }
        Ok(cgroup)
    }

    fn write(&self, file: &str, value: &str) -> anyhow::Result<()> {
        std::fs::write(self.path.join(file), value)
            .map_err(|e| anyhow::anyhow!("{}/{file}: {e}", self.path.display()))
    }

    /// Moves process `pid` into the cgroup (what it allocates from then on is charged to it).
    pub fn add(&self, pid: u32) -> anyhow::Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Its `cgroup.procs` file: a process that writes `0` to it moves itself in (what a child
    /// does between fork and exec, to be charged from its first allocation).
    pub fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// How many processes the kernel's OOM killer killed in the cgroup.
    pub fn oom_kills(&self) -> u64 {
        self.read(if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        })
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
        .unwrap_or(0)
    }

    /// Peak memory charged to the cgroup, in bytes (v1's `memory.max_usage_in_bytes`, v2's
    /// `memory.peak`; 0 when the kernel does not say).
    pub fn peak_bytes(&self) -> u64 {
        self.read(if self.v2 {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        })
        .trim()
        .parse()
        .unwrap_or(0)
    }

    /// One of the cgroup's files; empty when unreadable.
    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file)).unwrap_or_default()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // Its processes are dead (waited for) by now; an empty cgroup can be removed.
        if let Err(e) = std::fs::remove_dir(&self.path) {
            eprintln!("removing {}: {e}", self.path.display());
        }
    }
}
