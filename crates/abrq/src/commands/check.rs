//! `abrq check`: the config parses and validates, the state store opens,
//! and every destination proves it can be written, after saying what each
//! of its connection fields was taken to mean.

use std::path::Path;

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
    super::open_store(&config).await?;
    println!("state store: ok");
    let mut failures = 0;
    for s in &config.streams {
        let s = s.get_ref();
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
        anyhow::bail!("{failures} destination(s) failed the check");
    }
    Ok(())
}
