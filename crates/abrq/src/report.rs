//! What a person sees on a terminal: the progress bar, the summary table at
//! the end of `run --until-drained`, and status tables.

use std::sync::Arc;
use std::time::Duration;

use abrq_engine::Engine;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use serde_json::Value;

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
        staged += m.records_staged.with_label_values(&[&s.name]).get();
        delivered += s
            .destinations
            .iter()
            .filter(|d| d.switches().enabled)
            .map(|d| m.delivered_records.with_label_values(&d.labels.d()).get())
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

/// One row per stream's source: its state, where it reads (a database
/// source's slot and LSN, or last row) and how far behind it is.
pub fn source_table(body: &Value) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["stream", "source", "state", "position", "lag", "error"]);
    for s in body["streams"].as_array().into_iter().flatten() {
        let src = &s["source"];
        let p = &src["position"];
        let position = if let Some(slot) = p["slot"].as_str() {
            format!(
                "slot {slot}, read {}, confirmed {}, snapshot {} ({} rows)",
                p["read_lsn"].as_str().unwrap_or("-"),
                p["confirmed_lsn"].as_str().unwrap_or("-"),
                p["snapshot"]["state"].as_str().unwrap_or("-"),
                p["snapshot"]["rows"]
            )
        } else if let Some(table) = p["table"].as_str() {
            format!("{table} after {}", p["last"])
        } else {
            String::new()
        };
        let mut lag = Vec::new();
        if let Some(secs) = src["lag_seconds"].as_f64() {
            lag.push(format!("{secs:.1}s"));
        }
        if let Some(bytes) = src["lag_bytes"].as_i64() {
            lag.push(format!("{bytes} B of WAL"));
        }
        t.add_row([
            s["name"].as_str().unwrap_or("").to_string(),
            src["engine"].as_str().unwrap_or("").to_string(),
            src["state"].as_str().unwrap_or("").to_string(),
            position,
            lag.join(", "),
            src["error"].as_str().unwrap_or("").to_string(),
        ]);
    }
    t.to_string()
}

pub fn status_table(body: &Value) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "stream",
        "destination",
        "kind",
        "state",
        "hwm",
        "backlog",
        "breaker",
        "dead letters",
        "skipped",
        "last error",
    ]);
    for s in body["streams"].as_array().into_iter().flatten() {
        for d in s["destinations"].as_array().into_iter().flatten() {
            let state = match (d["enabled"].as_bool(), d["paused"].as_bool()) {
                (Some(false), _) => "disabled",
                (_, Some(true)) => "paused",
                _ => "draining",
            };
            t.add_row([
                s["name"].as_str().unwrap_or("").to_string(),
                d["name"].as_str().unwrap_or("").to_string(),
                d["kind"].as_str().unwrap_or("").to_string(),
                state.to_string(),
                d["high_water_mark"].to_string(),
                d["backlog"].to_string(),
                d["breaker"]["state"].as_str().unwrap_or("").to_string(),
                d["pending_dead_letters"].to_string(),
                d["skipped_batches"].to_string(),
                d["last_error"].as_str().unwrap_or("").to_string(),
            ]);
        }
    }
    t.to_string()
}

pub fn dead_letter_table(body: &Value) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "id", "seq", "records", "reason", "state", "attempts", "error",
    ]);
    for d in body["dead_letters"].as_array().into_iter().flatten() {
        t.add_row([
            d["id"].to_string(),
            d["seq"].to_string(),
            d["records"].to_string(),
            d["reason_class"].as_str().unwrap_or("").to_string(),
            d["state"].as_str().unwrap_or("").to_string(),
            d["attempts"].to_string(),
            d["error"].as_str().unwrap_or("").to_string(),
        ]);
    }
    t.to_string()
}
