//! `abrq-bench latency`: staged-to-delivered latency at a steady rate into
//! a local destination. Records arrive by HTTP ingest (the engine's own
//! ingest path, in process) in small requests at a fixed pace; the figure
//! is the p99 of the engine's histogram
//! `abrq_stream_fanout_delivery_latency_seconds` (one observation per
//! delivered batch, interpolated inside its bucket as Prometheus'
//! `histogram_quantile` does), beside the p50/p99 per record measured from
//! each request's acknowledgement to the moment status counts it delivered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use abrq_engine::{Engine, Metrics};
use clap::Args;

#[derive(Args)]
pub struct LatencyArgs {
    /// Records per second.
    #[arg(long, default_value_t = 5_000)]
    rate: u64,
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// One ingest request every this many milliseconds.
    #[arg(long, default_value_t = 10)]
    every_ms: u64,
    /// The local destination's format.
    #[arg(long, default_value = "jsonl.gz")]
    format: String,
}

const METRIC: &str = "abrq_stream_fanout_delivery_latency_seconds";

pub async fn run(a: LatencyArgs) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let text = super::stream_config(work.path(), "engine = \"http\"")
        + &format!(
            "[[streams.destinations]]\nname = \"lake\"\nengine = \"local\"\n\
             database = \"{}\"\nformat = \"{}\"\n",
            work.path().join("out").display(),
            a.format,
        );
    let config = abrq_core::config::Config::parse(&text, "bench")?;
    let store = Arc::new(abrq_state::SqliteStore::open(
        &work.path().join("data/state.db"),
    )?);
    let metrics = Arc::new(Metrics::new());
    let engine = Arc::new(
        Engine::start(&config, store, metrics.clone(), &super::destination_factory).await?,
    );
    let per_request = (a.rate * a.every_ms / 1000).max(1);
    let requests = a.secs * 1000 / a.every_ms;
    let total = per_request * requests;
    // request i is due at i * every_ms; each runs on its own task so a slow
    // commit delays only itself, as independent producers would
    let start = Instant::now() + Duration::from_millis(50);
    let mut sent = Vec::new();
    for i in 0..requests {
        let due = start + Duration::from_millis(i * a.every_ms);
        let body = body(i * per_request, per_request);
        let engine = engine.clone();
        sent.push(tokio::spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            let ack = engine.ingest("bench", body.into(), None).await?;
            anyhow::Ok((ack.first_seq.unwrap_or(0), Instant::now()))
        }));
    }
    // a batch's records are delivered when the destination's delivered
    // count passes them; poll status often and stamp what is new
    let mut delivered_at: Vec<Instant> = Vec::with_capacity(total as usize);
    let deadline = Instant::now() + Duration::from_secs(a.secs + 60);
    while (delivered_at.len() as u64) < total {
        anyhow::ensure!(Instant::now() < deadline, "the run did not finish");
        let st = engine.status().await?;
        let d = st[0].destinations[0].delivered_records.min(total);
        let now = Instant::now();
        while (delivered_at.len() as u64) < d {
            delivered_at.push(now);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // requests were staged in seq order; record j of the stream belongs to
    // the request with the j / per_request-th smallest seq
    let mut acks = Vec::with_capacity(requests as usize);
    for s in sent {
        acks.push(s.await??);
    }
    acks.sort_by_key(|(seq, _)| *seq);
    let first = acks.first().map(|(_, t)| *t);
    let last = acks.last().map(|(_, t)| *t);
    let mut ms: Vec<f64> = delivered_at
        .iter()
        .enumerate()
        .map(|(j, d)| {
            let acked = acks[j / per_request as usize].1;
            d.saturating_duration_since(acked).as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    let achieved = match (first, last) {
        (Some(f), Some(l)) => total as f64 / l.duration_since(f).as_secs_f64().max(1e-9),
        _ => 0.0,
    };
    let buckets = histogram(&metrics.render());
    engine.shutdown().await;
    println!();
    println!(
        "| staged to delivered, local {}, {total} records at {}/s (achieved {achieved:.0}/s), \
         requests of {per_request} every {} ms | ms |",
        a.format, a.rate, a.every_ms
    );
    println!("|---|---|");
    println!(
        "| p50 / p99 of `{METRIC}` ({} batches) | {:.1} / {:.1} |",
        buckets.last().map_or(0.0, |b| b.1),
        quantile(&buckets, 0.50) * 1000.0,
        quantile(&buckets, 0.99) * 1000.0
    );
    println!(
        "| per record, acknowledged to delivered: p50 / p99 / max | {:.1} / {:.1} / {:.1} |",
        at(0.50),
        at(0.99),
        at(1.0)
    );
    Ok(())
}

/// `n` NDJSON records numbered from `from`, about 200 bytes each.
fn body(from: u64, n: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n as usize * 201);
    for i in from..from + n {
        serde_json::to_writer(&mut out, &super::record(i, 200)).expect("a map serializes");
        out.push(b'\n');
    }
    out
}

/// The cumulative buckets `(le, count)` of the latency histogram in a
/// Prometheus text exposition (one stream and destination), `+Inf` last.
fn histogram(text: &str) -> Vec<(f64, f64)> {
    let prefix = format!("{METRIC}_bucket{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let count = l.rsplit(' ').next()?.parse().ok()?;
            Some((le, count))
        })
        .collect()
}

/// The q-quantile of cumulative buckets, linear inside its bucket (the
/// lower bound of the first bucket is 0), as `histogram_quantile` does.
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    let rank = q * total;
    let mut below = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return below.0;
            }
            let width = count - below.1;
            let into = if width > 0.0 {
                (rank - below.1) / width
            } else {
                0.0
            };
            return below.0 + (le - below.0) * into;
        }
        below = (le, count);
    }
    below.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_interpolates_inside_its_bucket() {
        let b = [
            (0.01, 50.0),
            (0.02, 90.0),
            (0.04, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert!((quantile(&b, 0.5) - 0.01).abs() < 1e-9);
        assert!((quantile(&b, 0.7) - 0.015).abs() < 1e-9);
        assert!((quantile(&b, 0.99) - 0.038).abs() < 1e-9);
    }

    #[test]
    fn histogram_reads_the_exposition() {
        let text = format!(
            "{METRIC}_bucket{{destination=\"lake\",le=\"0.001\"}} 3\n\
             {METRIC}_bucket{{destination=\"lake\",le=\"+Inf\"}} 7\n{METRIC}_sum 1\n"
        );
        assert_eq!(histogram(&text), vec![(0.001, 3.0), (f64::INFINITY, 7.0)]);
    }
}
