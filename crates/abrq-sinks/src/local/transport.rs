//! Objects as files under a base directory. A put is atomic and durable:
//! write a temporary file in the target's own directory, fsync it, rename
//! it over the final name, fsync the directory. A reader sees the old file
//! or the new one, never a part, and a replay simply replaces the file.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use abrq_core::DeliveryError;
use async_trait::async_trait;
use bytes::Bytes;

use super::errors::local_error;
use crate::failure::Failure;
use crate::object::{temp, ObjectTransport};

#[derive(Debug, Clone)]
pub struct LocalTransport {
    root: PathBuf,
    swept: Swept,
}

impl LocalTransport {
    /// `root` is the destination's base directory (config `database`); it
    /// is created on the first write if missing. A relative root is
    /// resolved against the current directory now, once.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::path::absolute(&root).unwrap_or(root);
        LocalTransport {
            root,
            swept: Swept::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file a key maps to.
    pub fn path_of(&self, key: &str) -> Result<PathBuf, DeliveryError> {
        match relative_path(key) {
            Some(rel) => Ok(self.root.join(rel)),
            None => Err(local_error(
                "map key to a path under",
                &self.root,
                io::Error::new(io::ErrorKind::InvalidInput, format!("unsafe key {key:?}")),
            )),
        }
    }
}

/// `key` as a relative path of plain names, or None if any part could step
/// outside the base directory (`..`, a root, a drive) or is empty.
pub(crate) fn relative_path(key: &str) -> Option<PathBuf> {
    if key.is_empty()
        || key
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return None;
    }
    let rel = PathBuf::from(key);
    rel.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then_some(rel)
}

#[async_trait]
impl ObjectTransport for LocalTransport {
    fn kind(&self) -> &'static str {
        "local"
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<(), DeliveryError> {
        let path = self.path_of(key)?;
        let swept = self.swept.clone();
        blocking(move || write_atomic(&path, &data, &swept)).await
    }

    async fn delete(&self, key: &str) -> Result<(), DeliveryError> {
        let path = self.path_of(key)?;
        blocking(move || match fs::remove_file(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r.map_err(|e| local_error("delete", &path, e)),
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Bytes, DeliveryError> {
        let path = self.path_of(key)?;
        blocking(move || {
            fs::read(&path)
                .map(Bytes::from)
                .map_err(|e| local_error("read", &path, e))
        })
        .await
    }
}

/// File I/O blocks, so it runs on tokio's blocking pool, never on a worker
/// that other destinations' drain loops share.
async fn blocking<R, F>(f: F) -> Result<R, DeliveryError>
where
    R: Send + 'static,
    F: FnOnce() -> Result<R, DeliveryError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        // Cancelled at shutdown, or a panic in std I/O: nothing the batch
        // did, so try again later.
        Err(join) => Err(Failure::Unknown.error(join)),
    }
}

/// Directories this process has cleared of an earlier process's leftover
/// temp files (shared by clones).
#[derive(Debug, Clone, Default)]
struct Swept(Arc<Mutex<HashSet<PathBuf>>>);

impl Swept {
    /// Removes what an earlier process left in `dir` (see
    /// [`temp::is_leftover`]), the first time this process writes there.
    /// Best effort: a leftover is litter, never data.
    fn sweep_once(&self, dir: &Path) {
        {
            let mut set = self.0.lock().unwrap_or_else(|p| p.into_inner());
            // one directory per prefix and day: bounded, but cap it
            if set.len() >= 4096 {
                set.clear();
            }
            if !set.insert(dir.to_path_buf()) {
                return;
            }
        }
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let removed = entries
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(temp::is_leftover))
            .filter(|e| fs::remove_file(e.path()).is_ok())
            .count();
        if removed > 0 {
            tracing::info!(dir = %dir.display(), removed, "removed temporary files an earlier run left");
        }
    }
}

fn write_atomic(path: &Path, data: &[u8], swept: &Swept) -> Result<(), DeliveryError> {
    let dir = path.parent().expect("a key maps below the root");
    ensure_dir(dir)?;
    swept.sweep_once(dir);
    let name = path
        .file_name()
        .expect("a key ends in a name")
        .to_string_lossy();
    // Same directory: rename is atomic only within one filesystem.
    let tmp = dir.join(temp::temp_name(&name));
    let result = write_then_rename(&tmp, path, data);
    if result.is_err() {
        // Best effort; the write's own error is the one worth reporting.
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(tmp: &Path, path: &Path, data: &[u8]) -> Result<(), DeliveryError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| local_error("create", tmp, e))?;
    f.write_all(data)
        .map_err(|e| local_error("write", tmp, e))?;
    // Data on disk before the name points at it, or a crash after the
    // rename could leave a complete-looking empty file.
    f.sync_all().map_err(|e| local_error("fsync", tmp, e))?;
    drop(f);
    fs::rename(tmp, path).map_err(|e| local_error("rename into place", path, e))?;
    // The rename itself is durable only once the directory is.
    sync_dir(path.parent().expect("a key maps below the root"))
}

/// Creates `dir` and any missing parents, fsyncing each new entry into its
/// parent so the new path survives a crash along with the file.
fn ensure_dir(dir: &Path) -> Result<(), DeliveryError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur.filter(|d| !d.exists()) {
        missing.push(d);
        cur = d.parent();
    }
    fs::create_dir_all(dir).map_err(|e| local_error("create directory", dir, e))?;
    for d in missing.iter().rev() {
        if let Some(parent) = d.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), DeliveryError> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| local_error("fsync directory", dir, e))
}

// Windows cannot open a directory as a file; NTFS journals the rename.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<(), DeliveryError> {
    Ok(())
}
