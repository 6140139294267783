//! `abrq run`: every stream, the admin API and /metrics, until a signal
//! (or, with --until-drained, until everything is delivered).

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use abrq_engine::{Engine, Metrics};
use anyhow::Context;

use crate::report;
use crate::server::{self, AppState};

pub async fn run(config_path: &Path, until_drained: bool, no_progress: bool) -> anyhow::Result<()> {
    let config = super::load_config(config_path)?;
    let addr = server::check_server(&config)?;
    let tls = server::Tls::from_config(&config.server)?;
    if let Some(tls) = &tls {
        tls.clone().reload_on_hangup()?;
    }
    let store = super::open_store(&config, true).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (server.listen)"))?;
    let metrics = Arc::new(Metrics::new());
    let engine = Engine::start(&config, store, metrics, &super::destination_factory).await?;
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

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
