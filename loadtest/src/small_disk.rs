//! A small filesystem for one test: a `tmpfs` of a fixed size mounted on a directory, unmounted
//! when dropped, and filled to the last byte on demand. A master whose data directory is on one
//! meets a real `ENOSPC` (No space left on device) from its own `write`s: the full disk of
//! production, caused for real. Needs root (`mount`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A `tmpfs` mounted on a directory; unmounted (lazily, so that a process still holding a
/// file in it does not keep it mounted) when dropped.
pub struct SmallDisk {
    dir: PathBuf,
}

impl SmallDisk {
    /// Creates `dir` when missing and mounts a `tmpfs` of `bytes` on it. Errors: `mount`
    /// failed (not root, or no `tmpfs`), with its message.
    pub fn mount(dir: &Path, bytes: u64) -> anyhow::Result<SmallDisk> {
        std::fs::create_dir_all(dir)?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| anyhow::anyhow!("mount: {e}"))?;
        anyhow::ensure!(
            out.status.success(),
            "mount -t tmpfs on {} (root needed): {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(SmallDisk {
            dir: dir.to_owned(),
        })
    }

    /// Fills the filesystem with a file of zeros (`filler`) until a write fails with `ENOSPC`:
    /// from then on, every write to it that needs a new block fails the same way. Returns the
    /// bytes written. Errors: any other I/O error.
    pub fn fill(&self) -> anyhow::Result<u64> {
        let mut file = std::fs::File::create(self.dir.join("filler"))?;
        let block = vec![0u8; 1 << 16];
        let mut written = 0u64;
        loop {
            match file.write(&block) {
                Ok(0) => return Ok(written),
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return Ok(written),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Deletes the file [`Self::fill`] wrote, freeing its space: writes succeed again.
    /// Errors: it could not be deleted (a missing filler is no error).
    pub fn free(&self) -> anyhow::Result<()> {
        match std::fs::remove_file(self.dir.join("filler")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
    }
}
