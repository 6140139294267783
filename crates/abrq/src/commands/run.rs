//! `abrq run`: every stream, the admin API and /metrics, until a signal
//! (or, with --until-drained, until everything is delivered).

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use abrq_engine::{Engine, Membership, Metrics};
use anyhow::Context;

use crate::report;
use crate::server::{self, AppState};

pub async fn run(config_path: &Path, until_drained: bool, no_progress: bool) -> anyhow::Result<()> {
    let config = super::load_config(config_path)?;
    let addr = server::check_server(&config)?;
    let tls = server::Tls::from_config(&config.server)?;
    super::hangup::handle(tls.clone())?;
    let opened = super::open_store(&config).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (server.listen)"))?;
    let metrics = Arc::new(Metrics::new());
    let membership = opened.leases.map(|leases| membership(&config, leases));
    if let Some(m) = &membership {
        tracing::info!(node_id = %m.node.node_id, instance = %m.node.instance, lease_timeout = ?m.lease_timeout, "sharing the state with any other process on it");
    }
    let engine = Engine::start_with(
        &config,
        opened.store,
        membership,
        metrics,
        &super::destination_factory,
        Arc::new(abrq_sources::open),
    )
    .await?;
    tracing::info!(
        listen = %addr,
        tls = tls.is_some(),
        streams = config.streams.len(),
        "abrq running"
    );
    let cancel = engine.cancel_token();
    let server_cancel = cancel.clone();
    let server = tokio::spawn(server::serve(
        listener,
        AppState::new(engine.clone(), &config),
        tls,
        server::Limits::from_config(&config.server),
        async move { server_cancel.cancelled().await },
    ));
    let progress = (until_drained && !no_progress && std::io::stderr().is_terminal())
        .then(|| report::Progress::start(engine.clone()));
    let outcome = tokio::select! {
        r = wait_for_signal() => { r?; tracing::info!("shutting down"); Ok(()) }
        r = engine.wait_drained(), if until_drained => r.map_err(|e| anyhow::anyhow!(e)),
    };
    if let Some(p) = progress {
        p.finish();
    }
    engine.shutdown().await;
    let _ = server.await;
    if until_drained && outcome.is_ok() {
        println!("{}", report::summary(&engine).await?);
    }
    outcome
}

/// This process among those sharing the state: `state.node_id`, else
/// `{hostname}-{pid}`.
fn membership(
    config: &abrq_core::config::Config,
    leases: Arc<dyn abrq_state::LeaseStore>,
) -> Membership {
    let host = super::hostname();
    let pid = std::process::id();
    let node_id = match &config.state.node_id {
        Some(id) if !id.as_str().is_empty() => id.as_str().to_string(),
        _ => format!("{host}-{pid}"),
    };
    Membership {
        leases,
        node: abrq_state::NodeIdentity {
            node_id,
            instance: uuid::Uuid::new_v4(),
        },
        host,
        pid,
        lease_timeout: config.state.lease_timeout.0,
        heartbeat: config.state.heartbeat(),
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
