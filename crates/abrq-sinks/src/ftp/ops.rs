//! The FTP command sequences behind each transport operation, on one
//! logged-in session. Paths are always full (base directory included) and
//! the session never changes directory, so any pooled session can serve
//! any operation.

use std::collections::HashSet;
use std::sync::Mutex;

use bytes::Bytes;
use suppaftp::{FtpError, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::errors::{session_survives, Cause};
use super::session::Session;
use crate::object::temp;

/// A failed step: what was being done to which path, and why.
#[derive(Debug)]
pub struct Fail {
    pub op: &'static str,
    pub path: String,
    pub cause: Cause,
}

fn at<'p>(op: &'static str, path: &'p str) -> impl FnOnce(FtpError) -> Fail + 'p {
    move |e| Fail {
        op,
        path: path.to_string(),
        cause: Cause::Ftp(e),
    }
}

/// Where one object goes: its directory, the directories to create for
/// it, a temporary name beside it and its final name.
#[derive(Debug, Clone)]
pub struct Placement {
    pub dir: String,
    /// `dir` and its ancestors, outermost first.
    pub ancestors: Vec<String>,
    pub temp: String,
    pub path: String,
}

/// Directories known to exist, so a put costs no MKD round trips once its
/// directory has been made. Forgotten when a STOR finds one missing.
#[derive(Default)]
pub struct DirCache(Mutex<HashSet<String>>);

impl DirCache {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn knows(&self, dir: &str) -> bool {
        self.set().contains(dir)
    }

    fn remember(&self, dir: &str) {
        let mut set = self.set();
        // One directory per prefix and day: bounded in practice, but cap it.
        if set.len() >= 4096 {
            set.clear();
        }
        set.insert(dir.to_string());
    }

    fn forget(&self, dir: &str) {
        self.set().remove(dir);
    }
}

/// Uploads to the temporary name, then renames it over the final name, so
/// a reader listing the directory never sees a final name with partial
/// content.
pub async fn put(
    s: &mut Session,
    dirs: &DirCache,
    p: &Placement,
    data: &Bytes,
) -> Result<(), Fail> {
    stage(s, dirs, p, data).await?;
    publish(s, p).await
}

/// The first half of [`put`]: the data under the temporary name only.
pub async fn stage(
    s: &mut Session,
    dirs: &DirCache,
    p: &Placement,
    data: &Bytes,
) -> Result<(), Fail> {
    let result = upload(s, dirs, p, data).await;
    clean_up_after(s, p, result).await
}

/// The second half of [`put`]: the staged temporary file renamed into place.
pub async fn publish(s: &mut Session, p: &Placement) -> Result<(), Fail> {
    let result = rename_over(s, &p.temp, &p.path).await;
    clean_up_after(s, p, result).await
}

/// Removes the temporary file of a failed step. Best effort, and only
/// while the session is in step: after a network failure the dot-named
/// temp file (if any) stays behind.
async fn clean_up_after(
    s: &mut Session,
    p: &Placement,
    result: Result<(), Fail>,
) -> Result<(), Fail> {
    if let Err(f) = &result {
        if session_survives(f.cause.kind()) {
            let _ = s.rm(&p.temp).await;
        }
    }
    result
}

async fn upload(s: &mut Session, dirs: &DirCache, p: &Placement, data: &Bytes) -> Result<(), Fail> {
    let known = dirs.knows(&p.dir);
    if !known {
        mkdir_p(s, p).await?;
        sweep(s, &p.dir).await;
    }
    match store(s, &p.temp, data).await {
        // Someone removed a directory we had made: make it again, once.
        Err(f) if known && f.cause.reply_code() == Some(550) => {
            dirs.forget(&p.dir);
            mkdir_p(s, p).await?;
            store(s, &p.temp, data).await?;
        }
        r => r?,
    }
    dirs.remember(&p.dir);
    Ok(())
}

/// Removes the temp files an earlier process left in `dir` (see
/// [`temp::is_leftover`]): run when a session first writes into a
/// directory this process has not seen. Best effort: a leftover is litter,
/// never data, and a listing that fails is not the put's failure.
async fn sweep(s: &mut Session, dir: &str) {
    let Ok(names) = s.nlst(Some(dir)).await else {
        return;
    };
    let mut removed = 0;
    for listed in names {
        // servers list bare names or whole paths
        let name = listed.rsplit('/').next().unwrap_or(&listed);
        if temp::is_leftover(name) && s.rm(format!("{dir}/{name}")).await.is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(dir, removed, "removed temporary files an earlier run left");
    }
}

/// `mkdir -p`: MKD the directory, and if that is refused walk down from the
/// outermost ancestor. Every refusal is tolerated (it usually means "exists",
/// and servers word that differently); a directory that really could not be
/// made fails the STOR that follows, with the server's own reason.
async fn mkdir_p(s: &mut Session, p: &Placement) -> Result<(), Fail> {
    match s.mkdir(&p.dir).await {
        Ok(()) => return Ok(()),
        Err(FtpError::UnexpectedResponse(_)) => {}
        Err(e) => return Err(at("create directory", &p.dir)(e)),
    }
    for dir in &p.ancestors {
        match s.mkdir(dir).await {
            Ok(()) | Err(FtpError::UnexpectedResponse(_)) => {}
            Err(e) => return Err(at("create directory", dir)(e)),
        }
    }
    Ok(())
}

async fn store(s: &mut Session, path: &str, data: &[u8]) -> Result<(), Fail> {
    let mut stream = s.put_with_stream(path).await.map_err(at("upload", path))?;
    stream
        .write_all(data)
        .await
        .map_err(|e| at("upload", path)(FtpError::ConnectionError(e)))?;
    // Closes the data connection and reads the 226: only then is it stored.
    stream.finish().await.map_err(at("upload", path))
}

/// RNFR/RNTO. A server that refuses to rename onto an existing name (some
/// do; pyftpdlib and vsftpd do not) gets the old file deleted and the
/// rename repeated: the final name is briefly absent, never partial.
async fn rename_over(s: &mut Session, temp: &str, path: &str) -> Result<(), Fail> {
    rnfr(s, temp).await?;
    match rnto(s, path).await {
        Ok(()) => Ok(()),
        Err(f) if f.cause.reply_code().is_some() => {
            delete(s, path).await?;
            rnfr(s, temp).await?;
            rnto(s, path).await
        }
        Err(f) => Err(f),
    }
}

async fn rnfr(s: &mut Session, temp: &str) -> Result<(), Fail> {
    s.custom_command(format!("RNFR {temp}"), &[Status::RequestFilePending])
        .await
        .map(drop)
        .map_err(at("rename (RNFR)", temp))
}

async fn rnto(s: &mut Session, path: &str) -> Result<(), Fail> {
    // 200 from non-compliant servers, as suppaftp's own rename accepts
    s.custom_command(
        format!("RNTO {path}"),
        &[Status::RequestedFileActionOk, Status::CommandOk],
    )
    .await
    .map(drop)
    .map_err(at("rename into place", path))
}

/// Reads the whole file.
pub async fn get(s: &mut Session, path: &str) -> Result<Bytes, Fail> {
    let mut stream = s.retr_as_stream(path).await.map_err(at("download", path))?;
    let mut body = Vec::new();
    stream
        .read_to_end(&mut body)
        .await
        .map_err(|e| at("download", path)(FtpError::ConnectionError(e)))?;
    stream.finish().await.map_err(at("download", path))?;
    Ok(Bytes::from(body))
}

/// DELE; a missing file counts as deleted. Servers answer 550 both for
/// "no such file" and "permission denied", so a refusal is checked with
/// SIZE: if the file is not there either, the delete has its effect.
pub async fn delete(s: &mut Session, path: &str) -> Result<(), Fail> {
    let refused = match s.rm(path).await {
        Ok(()) => return Ok(()),
        Err(e @ FtpError::UnexpectedResponse(_)) => at("delete", path)(e),
        Err(e) => return Err(at("delete", path)(e)),
    };
    match s.size(path).await {
        Err(FtpError::UnexpectedResponse(r)) if r.status == Status::FileUnavailable => Ok(()),
        // still there, or the server cannot say: the refusal stands
        Ok(_) | Err(FtpError::UnexpectedResponse(_) | FtpError::BadResponse) => Err(refused),
        Err(e) => Err(at("check after delete", path)(e)),
    }
}
