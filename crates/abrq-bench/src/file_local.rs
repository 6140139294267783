//! End to end, file source to a local `jsonl.gz` destination, against the
//! physical limit: a raw loop that reads the same lines, gzips each
//! 1,000-line batch at the same level and writes it durably (fsync the
//! file, rename, fsync the directory), as any durable writer must.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Instant;

use abrq_sinks::object::encode::GZIP_LEVEL;
use flate2::write::GzEncoder;
use flate2::Compression;

pub async fn run(records: u64, rounds: u32) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("input.ndjson");
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&input)?);
        for i in 0..records {
            serde_json::to_writer(&mut w, &super::record(i, 200))?;
            w.write_all(b"\n")?;
        }
    }
    let mb = std::fs::metadata(&input)?.len() as f64 / 1e6;
    let mut raw = Vec::new();
    let mut ours = Vec::new();
    let mut gz = Vec::new();
    for round in 0..rounds {
        let work = tempfile::tempdir()?;
        let (r, g) = raw_loop(&input, &work.path().join("raw"))?;
        let o = abrq_run(&input, work.path()).await?;
        println!(
            "round {round}: raw {:.1} MB/s (gzip alone {:.1} MB/s), abrq {:.1} MB/s",
            mb / r,
            mb / g,
            mb / o
        );
        raw.push(mb / r);
        ours.push(mb / o);
        gz.push(mb / g);
    }
    let (r, o, g) = (super::median(raw), super::median(ours), super::median(gz));
    println!();
    println!(
        "| file to local jsonl.gz, {records} records of 200 bytes ({mb:.0} MB) | MB/s of input |"
    );
    println!("|---|---|");
    println!("| gzip alone, level {GZIP_LEVEL}, one core | {g:.1} |");
    println!("| raw read + gzip + write + fsync + rename + fsync dir | {r:.1} |");
    println!("| abrq run --until-drained | {o:.1} |");
    println!("| ratio | {:.2} |", o / r);
    Ok(())
}

/// Returns (total seconds, seconds spent in gzip).
fn raw_loop(input: &Path, out: &Path) -> anyhow::Result<(f64, f64)> {
    std::fs::create_dir_all(out)?;
    let start = Instant::now();
    let mut gzip_secs = 0.0;
    let reader = BufReader::with_capacity(256 << 10, std::fs::File::open(input)?);
    let mut batch = Vec::with_capacity(256 << 10);
    let mut n = 0u64;
    let mut part = 0u64;
    let flush = |batch: &mut Vec<u8>, part: u64| -> anyhow::Result<f64> {
        let t = Instant::now();
        let mut enc = GzEncoder::new(
            Vec::with_capacity(batch.len() / 4),
            Compression::new(GZIP_LEVEL),
        );
        enc.write_all(batch)?;
        let bytes = enc.finish()?;
        let g = t.elapsed().as_secs_f64();
        let tmp = out.join(format!(".part-{part}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, out.join(format!("part-{part}.jsonl.gz")))?;
        // A rename is durable only once its directory is synced.
        std::fs::File::open(out)?.sync_all()?;
        batch.clear();
        Ok(g)
    };
    for line in reader.lines() {
        batch.extend_from_slice(line?.as_bytes());
        batch.push(b'\n');
        n += 1;
        if n.is_multiple_of(1000) {
            gzip_secs += flush(&mut batch, part)?;
            part += 1;
        }
    }
    if !batch.is_empty() {
        gzip_secs += flush(&mut batch, part)?;
    }
    Ok((start.elapsed().as_secs_f64(), gzip_secs))
}

async fn abrq_run(input: &Path, work: &Path) -> anyhow::Result<f64> {
    let text = super::file_stream_config(work, input)
        + &format!(
            r#"
[[streams.destinations]]
name = "lake"
engine = "local"
database = "{out}"
format = "jsonl.gz"
"#,
            out = work.join("out").display(),
        );
    super::run_until_drained(&text, work).await
}
