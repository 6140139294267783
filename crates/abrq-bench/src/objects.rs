//! `abrq-bench objects`: batches delivered through each object engine's
//! destination (`jsonl.gz`, built from config as `abrq run` builds it)
//! against a raw loop in the same run that serializes the same records,
//! gzips them at the same level and PUTs them with the same client to the
//! same server. Both deliver one batch at a time, on a connection made
//! before the clock starts; the destination also delivers the batches in
//! groups, as a drain loop does with a backlog (several objects in flight).
//! `--latency-ms` puts a loopback proxy that delays every request in front
//! of the network engines, as a distant cloud region would.
//!
//! The services are those of `scripts/services.sh` (endpoints from the
//! `ABRQ_TEST_*` variables, through abrq-testkit); each engine writes to a
//! fresh bucket, container or directory. Another object engine joins the
//! table with one more [`Engine`] in [`engines`].

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::time::Instant;

use abrq_core::config::{Config, DestinationConfig};
use abrq_core::Batch;
use abrq_sinks::object::encode::GZIP_LEVEL;
use abrq_sinks::object::{naming, ObjectTransport};
use abrq_testkit::{names, Azure, Gcs, Proxy, S3};
use anyhow::Context;
use flate2::write::GzEncoder;
use flate2::Compression;

#[derive(clap::Args, Clone)]
pub struct ObjectsArgs {
    #[arg(long, default_value_t = 100)]
    batches: u64,
    /// Records of 200 bytes per batch (abrq's default batch size).
    #[arg(long, default_value_t = 1000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Milliseconds a proxy adds to every request (network engines only).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Engines to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "local,s3,azure_blob,gcs")]
    engines: Vec<String>,
}

type Fresh = Pin<Box<dyn Future<Output = anyhow::Result<DestinationConfig>>>>;

/// The endpoint a destination config names: the service's own, or a
/// proxy's in front of it.
#[derive(Clone, Copy)]
pub struct Via(Option<u16>);

impl Via {
    /// `endpoint` (a URL) with its host and port replaced by the proxy's.
    fn url(self, endpoint: &str) -> String {
        match self.0 {
            None => endpoint.to_string(),
            Some(port) => {
                let (scheme, rest) = endpoint.split_once("://").unwrap_or(("http", endpoint));
                let path = rest.find('/').map_or("", |at| &rest[at..]);
                format!("{scheme}://127.0.0.1:{port}{path}")
            }
        }
    }
}

/// `host:port` of a URL.
fn authority(endpoint: &str) -> String {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest).to_string()
}

/// One engine: a destination config for a fresh place to write, and the
/// engine's transport from that config (the client the destination uses)
/// for the raw loop.
pub struct Engine {
    pub name: &'static str,
    pub fresh: fn(Via) -> Fresh,
    /// The service's endpoint URL; None for a local directory.
    pub endpoint: fn() -> Option<String>,
    pub transport: fn(&DestinationConfig) -> anyhow::Result<Box<dyn ObjectTransport>>,
}

pub fn engines() -> Vec<Engine> {
    vec![
        Engine {
            name: "local",
            fresh: |_| Box::pin(local()),
            endpoint: || None,
            transport: |c| {
                Ok(Box::new(abrq_sinks::LocalTransport::new(field(
                    &c.database,
                ))))
            },
        },
        Engine {
            name: "s3",
            fresh: |via| Box::pin(s3(via)),
            endpoint: || Some(S3::from_env().endpoint),
            transport: |c| Ok(Box::new(abrq_sinks::cloud::s3::transport(c)?)),
        },
        Engine {
            name: "azure_blob",
            fresh: |via| Box::pin(azure(via)),
            endpoint: || Some(Azure::from_env().endpoint),
            transport: |c| Ok(Box::new(abrq_sinks::cloud::azure::transport(c)?)),
        },
        Engine {
            name: "gcs",
            fresh: |via| Box::pin(gcs(via)),
            endpoint: || Some(Gcs::from_env().endpoint),
            transport: |c| Ok(Box::new(abrq_sinks::cloud::gcs::transport(c)?)),
        },
    ]
}

/// Seconds for one pass, and the part of them spent in gzip alone.
struct Pass {
    secs: f64,
    gzip_secs: f64,
}

pub async fn run(args: ObjectsArgs) -> anyhow::Result<()> {
    let batches: Vec<Batch> = (0..args.batches)
        .map(|s| super::generated_batch(s, args.records))
        .collect();
    let mb = super::json_lines_mb(&batches);
    println!(
        "{} batches of {} records of 200 bytes ({mb:.0} MB of JSON lines), {} rounds",
        args.batches, args.records, args.rounds
    );
    let latency = std::time::Duration::from_millis(args.latency_ms);
    if !latency.is_zero() {
        println!(
            "every request of a network engine delayed {} ms by a proxy",
            args.latency_ms
        );
    }
    let all = engines();
    let mut rows = Vec::new();
    for name in &args.engines {
        let engine = all
            .iter()
            .find(|e| e.name == name.as_str())
            .with_context(|| format!("no engine {name:?} in this bench"))?;
        let proxy = match ((engine.endpoint)(), latency.is_zero()) {
            (Some(endpoint), false) => {
                let proxy = Proxy::start(authority(&endpoint)).await;
                proxy.set_latency(latency);
                Some(proxy)
            }
            _ => None,
        };
        let via = Via(proxy.as_ref().map(Proxy::port));
        let cfg = (engine.fresh)(via)
            .await
            .with_context(|| format!("{name}: is it running? (scripts/services.sh up)"))?;
        let (mut raw, mut ours, mut grouped, mut gz) = (vec![], vec![], vec![], vec![]);
        for round in 0..args.rounds {
            let r = raw_loop(engine, &cfg, &batches).await?;
            let o = through_destination(engine, &cfg, &batches, false).await?;
            let g = through_destination(engine, &cfg, &batches, true).await?;
            println!(
                "{name} round {round}: raw {:.1} MB/s (gzip alone {:.1}), abrq {:.1} MB/s, \
                 grouped {:.1} MB/s",
                mb / r.secs,
                mb / r.gzip_secs,
                mb / o,
                mb / g
            );
            raw.push(mb / r.secs);
            gz.push(mb / r.gzip_secs);
            ours.push(mb / o);
            grouped.push(mb / g);
        }
        let med = super::median;
        rows.push((name.clone(), med(raw), med(ours), med(grouped), med(gz)));
    }
    println!();
    println!(
        "| engine | raw serialize + gzip + PUT | abrq, one at a time | ratio | abrq, grouped | \
         grouped / raw | gzip alone, level {GZIP_LEVEL}, one core |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, r, o, g, z) in rows {
        println!(
            "| {name} | {r:.1} | {o:.1} | {:.2} | {g:.1} | {:.2} | {z:.1} |",
            o / r,
            g / r
        );
    }
    println!(
        "\nMB/s of JSON lines delivered; \"grouped\" is the destination's deliver_group over \
         groups of its group limit, as the drain calls it with a backlog; medians of the rounds."
    );
    Ok(())
}

/// Serialize, gzip and PUT each batch with the engine's own client.
async fn raw_loop(
    engine: &Engine,
    cfg: &DestinationConfig,
    batches: &[Batch],
) -> anyhow::Result<Pass> {
    let t = (engine.transport)(cfg)?;
    let describe = |e: abrq_core::DeliveryError| anyhow::anyhow!(e.describe());
    // connect before the clock starts, as the destination's check() does
    t.put("raw/.warm", b"x".to_vec().into())
        .await
        .map_err(describe)?;
    let start = Instant::now();
    let mut gzip_secs = 0.0;
    let mut keys = Vec::with_capacity(batches.len());
    for b in batches {
        let mut lines = Vec::with_capacity(b.items.len() * 210);
        for r in b.records() {
            serde_json::to_writer(&mut lines, &r.fields)?;
            lines.push(b'\n');
        }
        let g = Instant::now();
        let mut enc = GzEncoder::new(
            Vec::with_capacity(lines.len() / 3),
            Compression::new(GZIP_LEVEL),
        );
        enc.write_all(&lines)?;
        let data = enc.finish()?;
        gzip_secs += g.elapsed().as_secs_f64();
        let key = format!("raw/part-{:016x}.jsonl.gz", b.meta.seq);
        t.put(&key, data.into()).await.map_err(describe)?;
        keys.push(key);
    }
    let secs = start.elapsed().as_secs_f64();
    keys.push("raw/.warm".into());
    for k in keys {
        let _ = t.delete(&k).await;
    }
    Ok(Pass { secs, gzip_secs })
}

/// The destination `abrq run` would build from `cfg`, one batch per
/// attempt or in groups; returns seconds.
async fn through_destination(
    engine: &Engine,
    cfg: &DestinationConfig,
    batches: &[Batch],
    grouped: bool,
) -> anyhow::Result<f64> {
    let dest = abrq_sinks::build("bench", cfg)?;
    let describe = |e: abrq_core::DeliveryError| anyhow::anyhow!(e.describe());
    dest.check().await.map_err(describe)?;
    let start = Instant::now();
    let size = if grouped { dest.group_limit() } else { 1 };
    for group in batches.chunks(size) {
        if let [one] = group {
            dest.deliver(one).await.map_err(describe)?;
        } else {
            dest.deliver_group(group).await.map_err(describe)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // the emulators keep everything in memory: remove what was written
    let t = (engine.transport)(cfg)?;
    let s = abrq_sinks::object_settings("bench", cfg).map_err(anyhow::Error::msg)?;
    for b in batches {
        let key = naming::object_key(&s.prefix, s.date_partitioning, s.format, &b.meta);
        let _ = t.delete(&key.map_err(describe)?).await;
    }
    Ok(secs)
}

fn field(v: &Option<abrq_core::config::Text>) -> String {
    v.as_ref().map(|t| t.0.clone()).unwrap_or_default()
}

/// The destination a user would configure: jsonl.gz, no manifest (the
/// default for object stores).
fn config(engine: &str, fields: &[(&str, &str)]) -> anyhow::Result<DestinationConfig> {
    let mut lines = format!("engine = \"{engine}\"\nprefix = \"abrq\"\nformat = \"jsonl.gz\"\n");
    for (k, v) in fields {
        lines.push_str(&format!("{k} = {v:?}\n"));
    }
    Ok(Config::destination("bench", &lines)?)
}

async fn local() -> anyhow::Result<DestinationConfig> {
    let dir = std::env::temp_dir().join(names::dir("bench-objects"));
    config("local", &[("database", &dir.display().to_string())])
}

async fn s3(via: Via) -> anyhow::Result<DestinationConfig> {
    let s3 = S3::from_env();
    let bucket = names::bucket("bench");
    s3.create_bucket(&bucket).await?;
    config(
        "s3",
        &[
            ("host", &via.url(&s3.endpoint)),
            ("database", &bucket),
            ("username", &s3.access_key_id),
            ("password", s3.secret_access_key.expose()),
            ("region", &s3.region),
        ],
    )
}

async fn azure(via: Via) -> anyhow::Result<DestinationConfig> {
    let az = Azure::from_env();
    let container = names::container("bench");
    az.create_container(&container).await?;
    config(
        "azure_blob",
        &[
            ("host", &via.url(&az.endpoint)),
            ("database", &container),
            ("username", &az.account),
            ("password", az.key.expose()),
        ],
    )
}

async fn gcs(via: Via) -> anyhow::Result<DestinationConfig> {
    let gcs = Gcs::from_env();
    let bucket = names::bucket("bench");
    gcs.create_bucket(&bucket).await?;
    config(
        "gcs",
        &[("host", &via.url(&gcs.endpoint)), ("database", &bucket)],
    )
}
