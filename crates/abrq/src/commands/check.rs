//! `abrq check`: the config parses and validates, the state store opens,
//! and every destination proves it can be written, after saying what each
//! of its connection fields was taken to mean.

use std::path::Path;

use abrq_core::config::SourceConfig;
use abrq_core::config::SourceEngine;
use abrq_sources::mysql::{Mode as MysqlMode, MysqlCdcSource, MysqlCursorSource, MysqlSettings};
use abrq_sources::postgres::{Mode, PgCdcSource, PgCursorSource, PostgresSettings};

pub async fn check(config_path: &Path) -> anyhow::Result<()> {
    let config = super::load_config(config_path)?;
    crate::server::check_server(&config)?;
    println!(
        "config {}: ok ({} streams)",
        config_path.display(),
        config.streams.len()
    );
    if crate::server::Tls::from_config(&config.server)?.is_some() {
        println!("tls certificate and key: ok");
    }
    let store = super::open_store(&config).await?;
    println!("state store: ok");
    let mut failures = 0;
    for s in &config.streams {
        let s = s.get_ref();
        let source = s.source.get_ref();
        if matches!(source.engine, SourceEngine::Postgres | SourceEngine::Mysql) {
            let label = format!("{} source ({})", s.name, source.engine.as_str());
            let cursor = store.cursor(s.name.as_str()).await.unwrap_or(None);
            let outcome = match source.engine {
                SourceEngine::Mysql => {
                    check_mysql(s.name.as_str(), source, cursor.as_deref()).await
                }
                _ => check_postgres(s.name.as_str(), source, cursor.as_deref()).await,
            };
            match outcome {
                Ok(detail) => println!("{label}: ok {detail}"),
                Err(e) => {
                    failures += 1;
                    println!("{label}: FAILED {e}");
                }
            }
        }
        for d in &s.destinations {
            let d = d.get_ref();
            let label = format!("{}/{} ({})", s.name, d.name, d.engine.as_str());
            for field in abrq_sinks::describe_connection(d) {
                println!("{label}: {field}");
            }
            let outcome = match super::destination_factory(s.name.as_str(), d) {
                Err(e) => Err(e),
                Ok(dest) => dest.check().await.map_err(|e| e.describe()),
            };
            match outcome {
                Ok(report) => println!("{label}: ok {}", report.detail),
                Err(e) => {
                    failures += 1;
                    println!("{label}: FAILED {e}");
                }
            }
        }
    }
    if failures > 0 {
        anyhow::bail!("{failures} source(s) or destination(s) failed the check");
    }
    Ok(())
}

/// Connects to a mysql source and says where it will read, or every
/// server setting that is missing.
async fn check_mysql(
    stream: &str,
    source: &SourceConfig,
    cursor: Option<&str>,
) -> Result<String, String> {
    let settings = MysqlSettings::from_config(source)?;
    let outcome = match settings.mode {
        MysqlMode::Cursor => match MysqlCursorSource::new(settings, cursor) {
            Ok(mut src) => src.check().await,
            Err(e) => Err(e),
        },
        MysqlMode::Cdc => match MysqlCdcSource::new(settings, stream, cursor) {
            Ok(mut src) => src.check().await,
            Err(e) => Err(e),
        },
    };
    outcome.map_err(|e| e.to_string())
}

/// Connects to a postgres source and says how it will read, or every
/// prerequisite that is missing.
async fn check_postgres(
    stream: &str,
    source: &SourceConfig,
    cursor: Option<&str>,
) -> Result<String, String> {
    let settings = PostgresSettings::from_config(source)?;
    let outcome = match settings.mode {
        Mode::Cursor => match PgCursorSource::new(settings, cursor) {
            Ok(mut src) => src.check().await,
            Err(e) => Err(e),
        },
        Mode::Cdc => match PgCdcSource::new(settings, stream, cursor) {
            Ok(mut src) => src.check().await,
            Err(e) => Err(e),
        },
    };
    outcome.map_err(|e| e.to_string())
}
