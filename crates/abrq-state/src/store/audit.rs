//! The audit log of operator actions.

use async_trait::async_trait;

use super::StoreResult;
use crate::types::*;

/// The audit log.
#[async_trait]
pub trait AuditRead: Send + Sync + 'static {
    /// Newest first.
    async fn audit_log(&self, stream: Option<&str>, limit: u32) -> StoreResult<Vec<AuditEntry>>;
}

/// An operator action's audit entry.
#[async_trait]
pub trait AuditWrite: Send + Sync + 'static {
    async fn record_audit(&self, entry: NewAudit) -> StoreResult<i64>;
}
