//! `abrq check`: the config parses and validates, the state store opens,
//! and every source and destination proves it can be reached, all probes
//! at once, each within a deadline. It prints a checklist: one line per
//! source and destination, for a failure its root cause and a hint; with
//! `--verbose` also the whole error and what each connection field was
//! taken to mean.

mod diagnose;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use abrq_core::config::{SourceConfig, StateLocation};
use abrq_sources::SourceSpec;

use anyhow::Context as _;
use diagnose::diagnose;

type Outcome = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// One line of the checklist.
struct Probe {
    label: String,
    /// What each connection field was taken to mean (destinations).
    fields: Vec<String>,
    /// A source's check already says what to fix, finding by finding;
    /// a destination's error is a client library's, and is diagnosed.
    diagnosed: bool,
    outcome: Outcome,
}

pub async fn check(config_path: &Path, verbose: bool, deadline: Duration) -> anyhow::Result<()> {
    let config = super::load_config(config_path)?;
    crate::server::check_server(&config)?;
    let destinations: usize = config
        .streams
        .iter()
        .map(|s| s.get_ref().destinations.len())
        .sum();
    println!(
        "ok    config {}: {} stream(s), {destinations} destination(s)",
        config_path.display(),
        config.streams.len()
    );
    if crate::server::Tls::from_config(&config.server)?.is_some() {
        println!("ok    tls certificate and key");
    }
    let opened = super::open_store(&config).await?;
    let store = opened.store;
    match config.state_location() {
        Ok(at) => {
            // how the connection is protected (open_store has applied it)
            let how = match &at {
                StateLocation::Postgres(url) => {
                    let allow = config.state.allow_plaintext;
                    let t = abrq_state::PostgresStore::transport(url, allow)
                        .map_err(anyhow::Error::msg)?;
                    format!(": {}", t.described)
                }
                StateLocation::Sqlite(_) => String::new(),
            };
            println!("ok    state store {at}{how}");
        }
        Err(_) => println!("ok    state store"),
    }
    if let Some(leases) = opened.leases {
        // Shared state: reading the leases proves the schema is current
        // and says who works on it now.
        let nodes = leases
            .nodes()
            .await
            .context("reading the processes sharing the state")?;
        let held = leases.leases().await.context("reading the leases")?;
        let live: Vec<&str> = nodes
            .iter()
            .filter(|n| n.live)
            .map(|n| n.node_id.as_str())
            .collect();
        println!(
            "ok    shared state: {} process(es) running on it{}; {} lease(s) held",
            live.len(),
            if live.is_empty() {
                String::new()
            } else {
                format!(" ({})", live.join(", "))
            },
            held.iter().filter(|l| l.live).count()
        );
    }
    let mut probes = Vec::new();
    for s in &config.streams {
        let s = s.get_ref();
        let source = s.source.get_ref();
        if abrq_sources::probed(source) {
            let cursor = store.cursor(s.name.as_str()).await.unwrap_or(None);
            let (stream, source) = (s.name.0.clone(), source.clone());
            probes.push(Probe {
                label: format!("{} source ({})", s.name, source.engine.as_str()),
                fields: Vec::new(),
                diagnosed: false,
                outcome: Box::pin(async move {
                    check_source(&stream, &source, cursor.as_deref()).await
                }),
            });
        }
        for d in &s.destinations {
            let d = d.get_ref();
            let built = super::destination_factory(s.name.as_str(), d);
            probes.push(Probe {
                label: format!("{}/{} ({})", s.name, d.name, d.engine.as_str()),
                fields: abrq_sinks::describe_connection(d),
                diagnosed: true,
                outcome: Box::pin(async move {
                    let dest = built?;
                    dest.check()
                        .await
                        .map(|r| r.detail)
                        .map_err(|e| e.describe())
                }),
            });
        }
    }
    let total = probes.len();
    let failures = run_all(probes, verbose, deadline).await;
    match failures {
        0 => {
            println!("all {total} checks passed");
            Ok(())
        }
        n => anyhow::bail!("{n} of {total} sources and destinations failed the check"),
    }
}

/// Runs every probe at once, each cut off at `deadline`, and prints the
/// checklist in the config's order. Returns how many failed.
async fn run_all(probes: Vec<Probe>, verbose: bool, deadline: Duration) -> usize {
    let (meta, outcomes): (Vec<_>, Vec<_>) = probes
        .into_iter()
        .map(|p| ((p.label, p.fields, p.diagnosed), p.outcome))
        .unzip();
    let results = futures::future::join_all(outcomes.into_iter().map(|o| async move {
        tokio::time::timeout(deadline, o)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {}s", deadline.as_secs_f32())))
    }))
    .await;
    let mut failures = 0;
    for ((label, fields, diagnosed), result) in meta.into_iter().zip(results) {
        match result {
            Ok(detail) => {
                println!("ok    {label}: {detail}");
                if verbose {
                    for f in &fields {
                        println!("        {f}");
                    }
                }
            }
            Err(error) => {
                failures += 1;
                let d = match diagnosed {
                    true => diagnose(&error),
                    false => diagnose::Diagnosis {
                        cause: error.clone(),
                        hint: None,
                    },
                };
                println!("FAIL  {label}: {}", d.cause);
                if let Some(hint) = d.hint {
                    println!("        hint: {hint}");
                }
                if verbose {
                    if d.hint.is_some() {
                        println!("        error: {error}");
                    }
                    for f in &fields {
                        println!("        {f}");
                    }
                }
            }
        }
    }
    failures
}

/// Connects to a database source and says how it will read, or every
/// prerequisite that is missing.
async fn check_source(
    stream: &str,
    source: &SourceConfig,
    cursor: Option<&str>,
) -> Result<String, String> {
    let spec = SourceSpec {
        stream,
        config: source,
        cursor,
    };
    let mut src = abrq_sources::open(&spec).map_err(|e| e.to_string())?;
    src.check().await.map_err(|e| e.to_string())
}
