//! `run --until-drained` on a terminal: the progress bar, and the summary
//! table at the end.

use std::sync::Arc;
use std::time::Duration;

use abrq_engine::Engine;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};

pub struct Progress {
    bar: ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    /// A bar of records staged (length) against the records the slowest
    /// enabled destination has delivered (position).
    pub fn start(engine: Arc<Engine>) -> Progress {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} records delivered ({per_sec})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let b = bar.clone();
        let task = tokio::spawn(async move {
            loop {
                let (staged, delivered) = totals(&engine);
                b.set_length(staged);
                b.set_position(delivered.min(staged));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Progress { bar, task }
    }

    pub fn finish(self) {
        self.task.abort();
        self.bar.finish();
    }
}

fn totals(engine: &Engine) -> (u64, u64) {
    let m = &engine.metrics;
    let mut staged = 0;
    let mut delivered = 0;
    for s in engine.streams() {
        staged += m.records_staged.with_label_values(&[s.name()]).get();
        delivered += s
            .destinations()
            .iter()
            .filter(|d| d.switches().enabled)
            .map(|d| m.delivered_records.with_label_values(&d.labels().d()).get())
            .min()
            .unwrap_or(0);
    }
    (staged, delivered)
}

/// Per destination: batches, records, bytes delivered in this run, and
/// dead letters.
pub async fn summary(engine: &Engine) -> anyhow::Result<String> {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "stream",
        "destination",
        "kind",
        "batches",
        "records",
        "bytes",
        "dead letters",
        "skipped batches",
    ]);
    for s in engine.status().await? {
        for d in &s.destinations {
            t.add_row([
                s.name.clone(),
                d.name.clone(),
                d.kind.clone(),
                d.delivered_batches.to_string(),
                d.delivered_records.to_string(),
                HumanBytes(d.delivered_bytes).to_string(),
                d.pending_dead_letters.to_string(),
                d.skipped_batches.to_string(),
            ]);
        }
    }
    Ok(t.to_string())
}
