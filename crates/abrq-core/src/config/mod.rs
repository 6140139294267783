//! Loading and validating `abrq.toml`: a typed structure, checked without
//! any connection. Every error names the key and its line.

mod model;
mod state_url;
mod toml_error;
mod values;

pub use model::*;
pub use state_url::StateLocation;
pub use values::{interpolate, Dur, Secret, Size, Text};

use std::collections::HashSet;
use std::path::Path;

use toml::Spanned;

use toml_error::describe;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config {origin}: {message}")]
    Invalid { origin: String, message: String },
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let config: Config = toml::from_str(text).map_err(|e| invalid(describe(text, e)))?;
        config.validate(text).map_err(invalid)?;
        Ok(config)
    }

    /// One destination, `name`, from the TOML lines of its table (`engine`
    /// and the rest), validated as part of an HTTP-fed stream `orders`:
    /// for tests and tools that build a destination without a whole file.
    pub fn destination(name: &str, lines: &str) -> Result<DestinationConfig, ConfigError> {
        let text = format!(
            "[[streams]]\nname = \"orders\"\n[streams.source]\nengine = \"http\"\n\
             [[streams.destinations]]\nname = {name:?}\n{lines}\n"
        );
        let config = Config::parse(&text, &format!("destination {name}"))?;
        Ok(config.streams[0].get_ref().destinations[0]
            .get_ref()
            .clone())
    }

    pub fn stream(&self, name: &str) -> Option<&StreamConfig> {
        self.streams
            .iter()
            .map(|s| s.get_ref())
            .find(|s| s.name.as_str() == name)
    }

    fn validate(&self, text: &str) -> Result<(), String> {
        self.state_location()
            .map_err(|e| format!("state.url: {e}"))?;
        let mut names = HashSet::new();
        for s in &self.streams {
            let at = line_of(text, s);
            let stream = s.get_ref();
            check_name("streams.name", stream.name.as_str(), at)?;
            if !names.insert(stream.name.as_str()) {
                return Err(format!(
                    "line {at}: streams.name: duplicate stream {:?}",
                    stream.name.0
                ));
            }
            if stream.batch.max_records == 0 {
                return Err(format!(
                    "line {at}: streams.batch.max_records must be at least 1"
                ));
            }
            validate_source(&stream.source, text)?;
            if stream.destinations.is_empty() {
                return Err(format!(
                    "line {at}: stream {:?} has no [[streams.destinations]]",
                    stream.name.0
                ));
            }
            let mut dests = HashSet::new();
            for d in &stream.destinations {
                let dl = line_of(text, d);
                check_name("streams.destinations.name", d.get_ref().name.as_str(), dl)?;
                if !dests.insert(d.get_ref().name.as_str()) {
                    return Err(format!(
                        "line {dl}: streams.destinations.name: duplicate destination {:?}",
                        d.get_ref().name.0
                    ));
                }
                validate_destination(d.get_ref(), dl)?;
            }
        }
        Ok(())
    }
}

/// 1-based line where a spanned table starts.
fn line_of<T>(text: &str, s: &Spanned<T>) -> usize {
    let start = s.span().start.min(text.len());
    text[..start].bytes().filter(|b| *b == b'\n').count() + 1
}

fn check_name(key: &str, name: &str, line: usize) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else if name.contains('\n') {
        // a multi-line string a typo opened may have taken in other lines,
        // secrets among them
        Err(format!(
            "line {line}: {key}: a name of several lines (not shown) must be 1-64 characters of letters, digits, '_' or '-'"
        ))
    } else {
        Err(format!(
            "line {line}: {key}: {name:?} must be 1-64 characters of letters, digits, '_' or '-'"
        ))
    }
}

fn validate_source(source: &Spanned<SourceConfig>, text: &str) -> Result<(), String> {
    let at = line_of(text, source);
    let s = source.get_ref();
    match s.engine {
        SourceEngine::File => {
            if s.path.as_ref().is_none_or(|p| p.as_str().is_empty()) {
                return Err(format!(
                    "line {at}: streams.source.path is required for engine \"file\""
                ));
            }
        }
        SourceEngine::Http => {}
        SourceEngine::Generate => {
            if s.records.is_none() {
                return Err(format!(
                    "line {at}: streams.source.records is required for engine \"generate\""
                ));
            }
        }
        SourceEngine::Postgres | SourceEngine::Mysql => {
            if s.table.is_none() {
                return Err(format!(
                    "line {at}: streams.source.table is required for a database source"
                ));
            }
        }
    }
    let csv = s.engine == SourceEngine::File && s.file_format() == FileFormat::Csv;
    if s.null_values.is_some() && !csv {
        return Err(format!(
            "line {at}: streams.source.null_values applies to CSV files only \
             (engine \"file\" with a .csv path or format = \"csv\")"
        ));
    }
    Ok(())
}

fn validate_destination(d: &DestinationConfig, at: usize) -> Result<(), String> {
    let need = |key: &str, v: &Option<Text>| -> Result<(), String> {
        match v {
            Some(t) if !t.as_str().is_empty() => Ok(()),
            _ => Err(format!(
                "line {at}: streams.destinations.{key} is required for engine {:?} (destination {:?})",
                d.engine.as_str(),
                d.name.0
            )),
        }
    };
    match d.engine {
        DestinationEngine::Local
        | DestinationEngine::S3
        | DestinationEngine::AzureBlob
        | DestinationEngine::Gcs
        | DestinationEngine::Ftp
        | DestinationEngine::Ftps
        | DestinationEngine::Kafka => need("database", &d.database)?,
        DestinationEngine::Postgres | DestinationEngine::Mysql => need("table", &d.table)?,
    }
    if d.retry.max_attempts == 0 {
        return Err(format!(
            "line {at}: streams.destinations.retry.max_attempts must be at least 1"
        ));
    }
    if d.breaker.failure_threshold == 0 {
        return Err(format!(
            "line {at}: streams.destinations.breaker.failure_threshold must be at least 1"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
data_dir = "/tmp/x"

[[streams]]
name = "orders"
[streams.source]
engine = "file"
path = "orders.ndjson"

[[streams.destinations]]
name = "lake"
engine = "local"
database = "/tmp/out"
format = "csv.gz"
password = "hunter2"
[streams.destinations.retry]
max_attempts = 3
initial_backoff = "10ms"
"#;

    #[test]
    fn parses_a_good_config_with_defaults() {
        let c = Config::parse(GOOD, "t.toml").unwrap();
        let s = c.stream("orders").unwrap();
        assert_eq!(s.batch.max_records, 1000);
        let d = s.destinations[0].get_ref();
        assert_eq!(d.format, ObjectFormat::CsvGz);
        assert_eq!(d.retry.max_attempts, 3);
        assert_eq!(d.retry.initial_backoff.0.as_millis(), 10);
        assert!(d.enabled);
        assert!(!d.manifest_enabled());
        assert_eq!(c.server.listen.as_str(), "127.0.0.1:8480");
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let bad = GOOD.replace("format = \"csv.gz\"", "formatt = \"csv.gz\"");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("formatt"), "{e}");
        assert!(e.contains("line 14"), "{e}");
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let bad = GOOD.replace("\"10ms\"", "\"ten\"");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("line 18"), "{e}");
        assert!(e.contains("initial_backoff"), "{e}");
        let bad = GOOD.replace("\"csv.gz\"", "\"xml\"");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("line 14") && e.contains("xml"), "{e}");
    }

    #[test]
    fn missing_required_field_names_key_and_line() {
        let bad = GOOD.replace("database = \"/tmp/out\"\n", "");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("streams.destinations.database"), "{e}");
        assert!(e.contains("line 10"), "{e}");
    }

    #[test]
    fn null_values_default_and_apply_to_csv_only() {
        let csv = GOOD.replace("orders.ndjson", "orders.csv");
        let c = Config::parse(&csv, "t.toml").unwrap();
        let src = c.stream("orders").unwrap().source.get_ref();
        assert_eq!(src.file_format(), FileFormat::Csv);
        assert!(src.null_values().iter().any(|v| v == "NA"));
        assert!(src.null_values().iter().any(|v| v == "\\N"));
        let set = csv.replace(
            "path = \"orders.csv\"",
            "path = \"orders.csv\"\nnull_values = [\"-\"]",
        );
        let c = Config::parse(&set, "t.toml").unwrap();
        let src = c.stream("orders").unwrap().source.get_ref();
        assert_eq!(src.null_values(), vec!["-".to_string()]);
        let ndjson = GOOD.replace(
            "path = \"orders.ndjson\"",
            "path = \"orders.ndjson\"\nnull_values = [\"NA\"]",
        );
        let e = Config::parse(&ndjson, "t.toml").unwrap_err().to_string();
        assert!(
            e.contains("line 6") && e.contains("null_values applies to CSV"),
            "{e}"
        );
        let bad = set.replace("[\"-\"]", "\"NA\"");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("null_values") && e.contains("line 9"), "{e}");
    }

    #[test]
    fn missing_env_var_names_the_line() {
        let bad = GOOD.replace("hunter2", "${ABRQ_TEST_NOT_SET_ANYWHERE}");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(
            e.contains("ABRQ_TEST_NOT_SET_ANYWHERE") && e.contains("line 15"),
            "{e}"
        );
    }
}
