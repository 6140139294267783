//! The local engine's one error classification: `std::io::Error` →
//! [`Disposition`]. Every I/O failure here is the destination's fault (its
//! directory, disk, permissions or mount), never the batch's: the drain
//! loop retries the same batch and the breaker opens while the operator
//! fixes the disk. The only per-batch failure, encoding, happens before any
//! I/O, in the shared object path.

use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

use abrq_core::{DeliveryError, Disposition};

/// What was being done to which path, with the OS error kept as the source.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} {}", path.display())]
pub struct LocalError {
    pub op: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// Decides what the drain loop does with an I/O failure.
pub fn classify(err: &io::Error) -> Disposition {
    match err.kind() {
        // The tree is not as it should be (a file where a directory goes,
        // a missing mount point, wrong owner, read-only mount): an operator
        // fixes it, then the same batch succeeds.
        ErrorKind::NotFound
        | ErrorKind::PermissionDenied
        | ErrorKind::NotADirectory
        | ErrorKind::IsADirectory
        | ErrorKind::AlreadyExists
        | ErrorKind::DirectoryNotEmpty
        | ErrorKind::ReadOnlyFilesystem
        | ErrorKind::TooManyLinks
        | ErrorKind::CrossesDevices
        | ErrorKind::InvalidInput
        | ErrorKind::Unsupported => Disposition::Retry,
        // Out of room. FileTooLarge included: the limit is the filesystem's
        // or a quota's, which an operator can raise; dead-lettering would
        // quietly fail every large batch instead of opening the breaker.
        ErrorKind::StorageFull
        | ErrorKind::QuotaExceeded
        | ErrorKind::FileTooLarge
        | ErrorKind::WriteZero
        | ErrorKind::OutOfMemory => Disposition::Retry,
        // Momentary.
        ErrorKind::Interrupted
        | ErrorKind::WouldBlock
        | ErrorKind::TimedOut
        | ErrorKind::ResourceBusy
        | ErrorKind::ExecutableFileBusy
        | ErrorKind::Deadlock
        | ErrorKind::StaleNetworkFileHandle => Disposition::Retry,
        // A network filesystem (NFS, SMB) under the base directory.
        ErrorKind::ConnectionRefused
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::NotConnected
        | ErrorKind::HostUnreachable
        | ErrorKind::NetworkUnreachable
        | ErrorKind::NetworkDown
        | ErrorKind::BrokenPipe
        | ErrorKind::AddrInUse
        | ErrorKind::AddrNotAvailable => Disposition::Retry,
        // Reading a probe back, or anything the OS could not name.
        ErrorKind::InvalidData
        | ErrorKind::UnexpectedEof
        | ErrorKind::NotSeekable
        | ErrorKind::ArgumentListTooLong
        | ErrorKind::Other => Disposition::Retry,
        // io::ErrorKind is #[non_exhaustive] (and has kinds newer than our
        // MSRV, e.g. InvalidFilename), so this arm cannot be avoided. A
        // kind the std adds later is still a disk problem, not the batch's.
        _ => Disposition::Retry,
    }
}

/// Wraps an I/O failure on `path`, classified, keeping the source chain.
pub fn local_error(op: &'static str, path: &Path, source: io::Error) -> DeliveryError {
    let disposition = classify(&source);
    DeliveryError::new(
        disposition,
        LocalError {
            op,
            path: path.to_path_buf(),
            source,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
