//! `abrq-bench ftp`: batches delivered through the ftp and ftps
//! destinations (`jsonl.gz`), against a raw loop in the same run that
//! serializes the same records, gzips them at the same level and uploads
//! them to a temporary name and renames it, on one logged-in session of the
//! same client, to the same server. Both sides deliver one batch at a time,
//! as a drain loop does, and connect and log in before the clock starts.
//!
//! ftp and ftps write a manifest by default, so the raw loop runs twice:
//! the object alone, and the object followed by its manifest (the same
//! files abrq writes, uploaded and renamed one after the other on one
//! session, as a plain loop would).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use abrq_core::config::Secret;
use abrq_core::{Batch, Destination};
use abrq_sinks::ftp::session::{self, Session, TlsCache};
use abrq_sinks::ftp::{FtpSettings, FtpTransport};
use abrq_sinks::object::encode::GZIP_LEVEL;
use abrq_sinks::object::{
    naming, Manifest, ObjectDestination, ObjectFormat, ObjectSettings, ObjectTransport,
};
use anyhow::Context;
use flate2::write::GzEncoder;
use flate2::Compression;
use tokio::io::AsyncWriteExt;

/// Where the servers are: `scripts/services.sh` defaults, overridden by the
/// same `ABRQ_TEST_*` variables the tests read.
#[derive(clap::Args, Clone)]
pub struct FtpArgs {
    #[arg(long, default_value_t = 300)]
    batches: u64,
    #[arg(long, default_value_t = 1000)]
    records: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    #[arg(long, env = "ABRQ_TEST_FTP_HOST", default_value = "127.0.0.1")]
    host: String,
    #[arg(long, env = "ABRQ_TEST_FTP_PORT", default_value_t = 2121)]
    ftp_port: u16,
    #[arg(long, env = "ABRQ_TEST_FTPS_PORT", default_value_t = 2990)]
    ftps_port: u16,
    #[arg(long, env = "ABRQ_TEST_FTP_USER", default_value = "abrq")]
    user: String,
    #[arg(
        long,
        env = "ABRQ_TEST_FTP_PASSWORD",
        default_value = "abrq-test",
        hide_env_values = true
    )]
    password: String,
    /// PEM to trust for ftps (default: the one scripts/services.sh made).
    #[arg(long, env = "ABRQ_TEST_FTPS_CA_FILE")]
    ca_file: Option<PathBuf>,
}

/// Seconds for one pass, and the part of them spent in gzip (raw only).
struct Pass {
    secs: f64,
    gzip_secs: f64,
}

pub async fn run(args: FtpArgs) -> anyhow::Result<()> {
    let batches: Vec<Batch> = (0..args.batches)
        .map(|s| super::generated_batch(s, args.records))
        .collect();
    let mb = super::json_lines_mb(&batches);
    println!(
        "{} batches of {} records of 200 bytes ({mb:.0} MB of JSON lines), {} rounds",
        args.batches, args.records, args.rounds
    );
    let mut rows = Vec::new();
    for secure in [false, true] {
        let settings = settings(&args, secure);
        // one Vec per column: gzip, raw, raw + manifest, abrq, its ratio to
        // raw + manifest and to raw, abrq without manifest, its ratio to raw
        let mut cols: [Vec<f64>; 8] = Default::default();
        for round in 0..args.rounds {
            // Load on the machine drifts: alternate the order, and take
            // each ratio within its own round.
            let (r, rm, m, n) = if round % 2 == 0 {
                let r = raw_loop(&settings, &batches, false).await?;
                let rm = raw_loop(&settings, &batches, true).await?;
                let m = through_destination(&settings, &batches, true).await?;
                let n = through_destination(&settings, &batches, false).await?;
                (r, rm, m, n)
            } else {
                let n = through_destination(&settings, &batches, false).await?;
                let m = through_destination(&settings, &batches, true).await?;
                let rm = raw_loop(&settings, &batches, true).await?;
                let r = raw_loop(&settings, &batches, false).await?;
                (r, rm, m, n)
            };
            let g = mb / r.gzip_secs;
            let (r, rm, m, n) = (mb / r.secs, mb / rm.secs, mb / m.secs, mb / n.secs);
            println!(
                "{} round {round}: raw {r:.1} MB/s (gzip alone {g:.1}), raw with manifest \
                 {rm:.1}, abrq {m:.1} MB/s ({:.2} of raw with manifest, {:.2} of raw), \
                 abrq without manifest {n:.1} MB/s ({:.2})",
                settings.server(),
                m / rm,
                m / r,
                n / r
            );
            for (col, v) in cols.iter_mut().zip([g, r, rm, m, m / rm, m / r, n, n / r]) {
                col.push(v);
            }
        }
        rows.push((settings.server(), cols.map(super::median)));
        remove_dirs(&settings).await;
    }
    println!();
    println!(
        "| server | gzip alone, level {GZIP_LEVEL} | raw: object | raw: object, then manifest | \
         abrq (manifest on, the default) | ratio to raw with manifest | ratio to raw object | \
         abrq, manifest off | ratio to raw object |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (server, [g, r, rm, m, mrm, mr, n, nr]) in rows {
        println!(
            "| {server} | {g:.1} | {r:.1} | {rm:.1} | {m:.1} | {mrm:.2} | {mr:.2} | {n:.1} | {nr:.2} |"
        );
    }
    println!(
        "\nMB/s of JSON lines delivered, one batch at a time; medians of the rounds \
         (ratios taken within each round)."
    );
    Ok(())
}

fn settings(args: &FtpArgs, secure: bool) -> FtpSettings {
    let ca_file = secure.then(|| {
        args.ca_file.clone().unwrap_or_else(|| {
            let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
            PathBuf::from(home).join(".cache/abrq/certs/ftps.crt")
        })
    });
    FtpSettings {
        secure,
        host: args.host.clone(),
        port: if secure {
            args.ftps_port
        } else {
            args.ftp_port
        },
        username: args.user.clone(),
        password: Secret::new(args.password.clone()),
        // a fresh directory per pass, so no pass overwrites another's files
        base_dir: format!("/abrq-bench-{:016x}", nanos()),
        ca_file,
        connect_timeout: Duration::from_secs(10),
        op_timeout: Duration::from_secs(60),
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

async fn raw_loop(
    settings: &FtpSettings,
    batches: &[Batch],
    manifest: bool,
) -> anyhow::Result<Pass> {
    let mut s: Session = session::open(settings, &TlsCache::default())
        .await
        .with_context(|| format!("connect to {}", settings.server()))?;
    let dir = format!("{}/raw", settings.base_dir);
    for d in [settings.base_dir.as_str(), dir.as_str()] {
        let _ = s.mkdir(d).await;
    }
    let start = Instant::now();
    let mut gzip_secs = 0.0;
    let mut names = Vec::new();
    for b in batches {
        let t = Instant::now();
        let mut lines = Vec::with_capacity(b.items.len() * 210);
        for r in b.records() {
            serde_json::to_writer(&mut lines, &r.fields)?;
            lines.push(b'\n');
        }
        let mut enc = GzEncoder::new(
            Vec::with_capacity(lines.len() / 3),
            Compression::new(GZIP_LEVEL),
        );
        enc.write_all(&lines)?;
        let data = enc.finish()?;
        gzip_secs += t.elapsed().as_secs_f64();
        let name = format!("{dir}/part-{}.jsonl.gz", &b.meta.idempotency_key[..16]);
        let temp = format!("{dir}/.part-{}.tmp", b.meta.seq);
        let mut up = s.put_with_stream(&temp).await?;
        up.write_all(&data).await?;
        up.finish().await?;
        s.rename(&temp, &name).await?;
        if manifest {
            let m = Manifest::new(&name, &data, b.meta.records, &b.meta, ObjectFormat::JsonlGz);
            let mname = naming::manifest_key(&name);
            let mut up = s.put_with_stream(&temp).await?;
            up.write_all(&m.to_json()).await?;
            up.finish().await?;
            s.rename(&temp, &mname).await?;
            names.push(mname);
        }
        names.push(name);
    }
    let secs = start.elapsed().as_secs_f64();
    for n in names {
        let _ = s.rm(&n).await;
    }
    let _ = s.rmdir(&dir).await;
    Ok(Pass { secs, gzip_secs })
}

async fn through_destination(
    settings: &FtpSettings,
    batches: &[Batch],
    manifest: bool,
) -> anyhow::Result<Pass> {
    let transport = FtpTransport::new(settings.clone());
    let dest = ObjectDestination::new(
        transport.clone(),
        ObjectSettings {
            stream: "bench".into(),
            destination: "bench".into(),
            prefix: if manifest { "dest-m" } else { "dest" }.into(),
            format: ObjectFormat::JsonlGz,
            date_partitioning: false,
            manifest,
        },
    );
    // connects, logs in and makes the directory, as the raw loop does
    // before its clock starts
    dest.check()
        .await
        .map_err(|e| anyhow::anyhow!(e.describe()))?;
    let start = Instant::now();
    for b in batches {
        dest.deliver(b)
            .await
            .map_err(|e| anyhow::anyhow!(e.describe()))?;
    }
    let secs = start.elapsed().as_secs_f64();
    for b in batches {
        let key = dest
            .object_key(b)
            .map_err(|e| anyhow::anyhow!(e.describe()))?;
        let _ = transport.delete(&key).await;
        let _ = transport.delete(&naming::manifest_key(&key)).await;
    }
    Ok(Pass {
        secs,
        gzip_secs: 0.0,
    })
}

/// Best effort: the passes deleted their files; leave no empty directories.
async fn remove_dirs(settings: &FtpSettings) {
    if let Ok(mut s) = session::open(settings, &TlsCache::default()).await {
        for d in ["dest-m", "dest", "raw"] {
            let _ = s.rmdir(format!("{}/{d}", settings.base_dir)).await;
        }
        let _ = s.rmdir(&settings.base_dir).await;
    }
}
