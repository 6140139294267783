//! Logs on stderr: text for people (colours only on a terminal) or one
//! JSON object per line for collectors, filtered by `ABRQ_LOG` (default
//! `info`), with client libraries' repeats held back ([`dedupe`]).

mod dedupe;

use std::io::IsTerminal;
use std::time::Duration;

use clap::ValueEnum;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How long a client library's message is not shown again.
const REPEAT_WINDOW: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `default` applies unless `ABRQ_LOG` is set (`info`, or for `check`,
/// whose checklist already says what the client libraries would).
pub fn init(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_env("ABRQ_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let output = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(dedupe::Dedupe::new(REPEAT_WINDOW))
        .with(output)
        .init();
}
