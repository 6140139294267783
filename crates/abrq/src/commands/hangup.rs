//! SIGHUP, handled for as long as `abrq run` runs, with or without TLS:
//! its default action would end the process with no lease hand-back and
//! no final mark. It reloads what can be reloaded (the TLS certificate)
//! and logs what it did.

use std::sync::Arc;

use anyhow::Context;
use tokio::signal::unix::{signal, SignalKind};

use crate::server::Tls;

pub fn handle(tls: Option<Arc<Tls>>) -> anyhow::Result<()> {
    let mut hup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match &tls {
                Some(tls) => tls.reload_logged(),
                None => tracing::info!(
                    "SIGHUP: nothing to reload (no TLS certificate); the config file is read \
                     at start, so restart to apply its changes"
                ),
            }
        }
    });
    Ok(())
}
