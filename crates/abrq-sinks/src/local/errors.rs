//! The local engine's one error classification. Every local I/O failure
//! is the destination's (its directory, disk, permissions or mount), never
//! the batch's: the batch was encoded whole before any I/O, so the same
//! batch succeeds once the operator fixes the disk. There is nothing to
//! tell apart, so nothing is matched: the drain loop retries and the
//! breaker opens meanwhile.

use std::io;
use std::path::{Path, PathBuf};

use abrq_core::DeliveryError;

use crate::failure::Failure;

/// What was being done to which path, with the OS error kept as the source.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {}", path.display())]
pub struct LocalError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// What an I/O failure means: always the destination's storage.
pub fn classify(_: &io::Error) -> Failure {
    Failure::Storage
}

/// Wraps an I/O failure on `path`, classified, keeping the source chain.
pub fn local_error(op: &'static str, path: &Path, source: io::Error) -> DeliveryError {
    classify(&source).error(LocalError {
        op,
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn disk_trouble_is_transient_and_keeps_its_source() {
        for kind in [
            ErrorKind::NotADirectory,
            ErrorKind::PermissionDenied,
            ErrorKind::StorageFull,
            ErrorKind::NotFound,
            ErrorKind::Interrupted,
        ] {
            let e = local_error("write", Path::new("/x/y"), io::Error::from(kind));
            assert!(e.is_transient(), "{kind:?}");
            assert!(
                e.describe().starts_with("cannot write /x/y: "),
                "{}",
                e.describe()
            );
            let src = std::error::Error::source(&e).unwrap();
            let io = src.source().unwrap().downcast_ref::<io::Error>().unwrap();
            assert_eq!(io.kind(), kind);
        }
    }
}
