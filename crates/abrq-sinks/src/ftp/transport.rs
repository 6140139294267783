//! [`FtpTransport`]: objects as files on an FTP or FTPS server, written to a
//! temporary name beside the target and renamed into place. Sessions come
//! from a small pool; every operation is bounded by a timeout, and a session
//! that failed in a way that may have left it out of step is never reused.

use std::sync::Arc;
use std::time::Duration;

use abrq_core::DeliveryError;
use async_trait::async_trait;
use bytes::Bytes;

use super::config::FtpSettings;
use super::errors::{ftp_error, session_survives, Cause};
use super::ops::{self, DirCache, Placement};
use super::pool::Pool;
use super::session::{self, Session, TlsCache};
use crate::object::{temp, ObjectTransport};

/// A session idle this long is checked with NOOP before use: a server or a
/// NAT box may have dropped it, silently in the worst case, and a command
/// on a silently dead connection would hang until the operation timeout.
const PROBE_AFTER: Duration = Duration::from_secs(15);
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct FtpTransport {
    inner: Arc<Inner>,
}

struct Inner {
    settings: FtpSettings,
    server: String,
    pool: Pool,
    tls: TlsCache,
    dirs: DirCache,
}

impl std::fmt::Debug for FtpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FtpTransport")
            .field("settings", &self.inner.settings)
            .field("idle_sessions", &self.inner.pool.idle_count())
            .finish()
    }
}

/// One transport operation, run on whichever session the pool provides.
enum Op<'a> {
    Put(&'a Placement, &'a Bytes),
    /// The upload of a put, to the temporary name only.
    Stage(&'a Placement, &'a Bytes),
    /// The rename of a put, of a file staged before.
    Publish(&'a Placement),
    Get(&'a str),
    Delete(&'a str),
}

impl FtpTransport {
    /// No I/O: the first operation connects.
    pub fn new(settings: FtpSettings) -> Self {
        FtpTransport {
            inner: Arc::new(Inner {
                server: settings.server(),
                settings,
                pool: Pool::new(Pool::DEFAULT_MAX_IDLE),
                tls: TlsCache::default(),
                dirs: DirCache::default(),
            }),
        }
    }

    pub fn settings(&self) -> &FtpSettings {
        &self.inner.settings
    }

    /// Logged-in sessions waiting for reuse.
    pub fn idle_sessions(&self) -> usize {
        self.inner.pool.idle_count()
    }

    /// The server path of `key`, refusing keys [`safe_key`] refuses.
    pub fn path_of(&self, key: &str) -> Result<String, DeliveryError> {
        if safe_key(key).is_none() {
            let cause = Cause::Key(key.to_string());
            return Err(ftp_error("map key", key, &self.inner.server, cause));
        }
        Ok(self.inner.settings.path_of(key))
    }

    fn placement(&self, key: &str) -> Result<Placement, DeliveryError> {
        let path = self.path_of(key)?;
        let (parent, name) = path.rsplit_once('/').expect("a path has a base directory");
        let dir = if parent.is_empty() { "/" } else { parent }.to_string();
        let mut ancestors = Vec::new();
        let mut acc = String::new();
        for part in parent.split('/') {
            if part.is_empty() {
                // only the leading slash of an absolute path
                acc.push('/');
                continue;
            }
            if !acc.is_empty() && !acc.ends_with('/') {
                acc.push('/');
            }
            acc.push_str(part);
            ancestors.push(acc.clone());
        }
        // Same directory: a rename is atomic only there.
        let temp = format!("{parent}/{}", temp::temp_name(name));
        Ok(Placement {
            dir,
            ancestors,
            temp,
            path,
        })
    }

    async fn connect(&self) -> Result<Session, DeliveryError> {
        let s = &self.inner.settings;
        let fail = |cause| ftp_error("log in as", &s.username, &self.inner.server, cause);
        match tokio::time::timeout(s.connect_timeout, session::open(s, &self.inner.tls)).await {
            Ok(Ok(session)) => Ok(session),
            Ok(Err(cause)) => Err(fail(cause)),
            Err(_) => Err(fail(Cause::Timeout(s.connect_timeout))),
        }
    }

    /// A pooled session that answers, or a new one; and whether it was pooled.
    async fn session(&self) -> Result<(Session, bool), DeliveryError> {
        while let Some((mut s, idle)) = self.inner.pool.take() {
            if idle < PROBE_AFTER {
                return Ok((s, true));
            }
            if let Ok(Ok(())) = tokio::time::timeout(PROBE_TIMEOUT, s.noop()).await {
                return Ok((s, true));
            }
        }
        Ok((self.connect().await?, false))
    }

    async fn exec(&self, s: &mut Session, op: &Op<'_>) -> Result<Option<Bytes>, ops::Fail> {
        match op {
            Op::Put(p, data) => ops::put(s, &self.inner.dirs, p, data).await.map(|()| None),
            Op::Stage(p, data) => ops::stage(s, &self.inner.dirs, p, data)
                .await
                .map(|()| None),
            Op::Publish(p) => ops::publish(s, p).await.map(|()| None),
            Op::Get(path) => ops::get(s, path).await.map(Some),
            Op::Delete(path) => ops::delete(s, path).await.map(|()| None),
        }
    }

    /// Removes a staged temp file after `error` ended its put, and returns
    /// the error.
    async fn discard(&self, staged: &Placement, error: DeliveryError) -> DeliveryError {
        let _ = self.run(Op::Delete(&staged.temp)).await;
        error
    }

    async fn run(&self, op: Op<'_>) -> Result<Option<Bytes>, DeliveryError> {
        let (name, path, bytes) = match &op {
            Op::Put(p, data) | Op::Stage(p, data) => ("upload", p.path.as_str(), data.len()),
            Op::Publish(p) => ("rename into place", p.path.as_str(), 0),
            Op::Get(path) => ("download", *path, 0),
            Op::Delete(path) => ("delete", *path, 0),
        };
        let limit = self.inner.settings.transfer_allowance(bytes);
        let mut may_retry = true;
        loop {
            let (mut s, pooled) = self.session().await?;
            let fail = match tokio::time::timeout(limit, self.exec(&mut s, &op)).await {
                Ok(Ok(out)) => {
                    self.inner.pool.give_back(s);
                    return Ok(out);
                }
                Ok(Err(fail)) => fail,
                // The session is dropped here, mid-command: never reused.
                Err(_) => {
                    let cause = Cause::Timeout(limit);
                    return Err(ftp_error(name, path, &self.inner.server, cause));
                }
            };
            let kind = fail.cause.kind();
            if session_survives(kind) {
                self.inner.pool.give_back(s);
            } else if pooled && may_retry {
                // The pooled session died while idle (server timeout or
                // restart, dropped link): its siblings most likely did too.
                // Once more on a fresh connection; every operation here can
                // be repeated safely.
                may_retry = false;
                self.inner.pool.clear();
                continue;
            }
            return Err(ftp_error(
                fail.op,
                &fail.path,
                &self.inner.server,
                fail.cause,
            ));
        }
    }
}

/// `key`, unless it is not plain names separated by `/` (so a key cannot
/// leave the base directory) or would break the command line it is sent
/// on.
pub(super) fn safe_key(key: &str) -> Option<&str> {
    let bad = key.is_empty()
        || key.contains(['\r', '\n', '\0'])
        || key
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..");
    (!bad).then_some(key)
}

#[async_trait]
impl ObjectTransport for FtpTransport {
    fn kind(&self) -> &'static str {
        if self.inner.settings.secure {
            "ftps"
        } else {
            "ftp"
        }
    }

    /// Each upload holds a session (two with a manifest), and servers cap
    /// sessions per user: fewer at once than an object store takes.
    fn max_in_flight(&self) -> usize {
        super::pool::Pool::DEFAULT_MAX_IDLE / 2
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<(), DeliveryError> {
        let placement = self.placement(key)?;
        self.run(Op::Put(&placement, &data)).await.map(drop)
    }

    /// Both uploads at once, on two pooled sessions, to their temporary
    /// names; then the renames in order, so the sidecar's final name never
    /// appears before the object's. On ftps this hides most of the
    /// sidecar's cost: its data connection and TLS handshake overlap the
    /// object's transfer instead of following it.
    async fn put_with_sidecar(
        &self,
        key: &str,
        data: Bytes,
        sidecar_key: &str,
        sidecar: Bytes,
    ) -> Result<(), DeliveryError> {
        let object = self.placement(key)?;
        let side = self.placement(sidecar_key)?;
        let (a, b) = tokio::join!(
            self.run(Op::Stage(&object, &data)),
            self.run(Op::Stage(&side, &sidecar)),
        );
        match (a, b) {
            (Ok(_), Ok(_)) => {}
            // A failed stage removed its own temp file; remove the one that
            // landed (best effort: a later attempt uses new names).
            (Ok(_), Err(e)) => return Err(self.discard(&object, e).await),
            (Err(e), Ok(_)) => return Err(self.discard(&side, e).await),
            (Err(e), Err(_)) => return Err(e),
        }
        if let Err(e) = self.run(Op::Publish(&object)).await {
            return Err(self.discard(&side, e).await);
        }
        match self.run(Op::Publish(&side)).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self.discard(&side, e).await),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), DeliveryError> {
        let path = self.path_of(key)?;
        self.run(Op::Delete(&path)).await.map(drop)
    }

    async fn get(&self, key: &str) -> Result<Bytes, DeliveryError> {
        let path = self.path_of(key)?;
        let out = self.run(Op::Get(&path)).await?;
        Ok(out.expect("a download returns its bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ftp::config::FtpSettings;

    fn transport(base: &str) -> FtpTransport {
        let cfg = crate::ftp::tests::config("ftp", "127.0.0.1", 21, base, "");
        FtpTransport::new(FtpSettings::from_config(&cfg).unwrap())
    }

    #[test]
    fn placement_beside_the_target() {
        let p = transport("/srv/out/")
            .placement("a/dt=1/part-1.gz")
            .unwrap();
        assert_eq!(p.path, "/srv/out/a/dt=1/part-1.gz");
        assert_eq!(p.dir, "/srv/out/a/dt=1");
        assert_eq!(
            p.ancestors,
            ["/srv", "/srv/out", "/srv/out/a", "/srv/out/a/dt=1"]
        );
        assert!(
            p.temp.starts_with("/srv/out/a/dt=1/.part-1.gz.tmp-"),
            "{}",
            p.temp
        );
        let p = transport("out").placement("part-1.gz").unwrap();
        assert_eq!(
            (p.dir.as_str(), p.ancestors.as_slice()),
            ("out", &["out".to_string()][..])
        );
        let p = transport("/").placement("part-1.gz").unwrap();
        assert_eq!((p.path.as_str(), p.dir.as_str()), ("/part-1.gz", "/"));
        assert!(p.temp.starts_with("/.part-1.gz.tmp-"), "{}", p.temp);
    }

    #[test]
    fn keys_cannot_leave_the_base_directory_or_inject_commands() {
        let t = transport("out");
        for key in [
            "../x",
            "a/../../x",
            "/abs",
            "a//b",
            "",
            "./a",
            "a/.",
            "a\r\nDELE b",
        ] {
            let e = t.path_of(key).unwrap_err();
            assert!(e.is_transient(), "{key:?}");
        }
    }
}
