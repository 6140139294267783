//! Loading and validating `abrq.toml`: a typed structure, checked without
//! any connection. Every error names the key and its line. Core checks
//! what every source and destination has; each engine's own keys are
//! checked by the engine's config (`abrq_sources::validate`,
//! `abrq_sinks::validate`), which the binary runs right after loading.

mod model;
mod options;
mod state_url;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod toml_error;
mod values;

pub use model::*;
pub use options::Options;
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
        let mut config: Config = toml::from_str(text).map_err(|e| invalid(describe(text, e)))?;
        config.locate(text);
        config.validate(text).map_err(invalid)?;
        Ok(config)
    }

    /// One destination, `name`, from the TOML lines of its table (`engine`
    /// and the rest), parsed as part of an HTTP-fed stream `orders`: for
    /// tests and tools that build a destination without a whole file. Its
    /// engine's own keys are checked when the engine reads them.
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

    /// Gives every source and destination its line, and its options their
    /// lines and names for messages.
    fn locate(&mut self, text: &str) {
        for s in &mut self.streams {
            let s = s.get_mut();
            let stream = format!("stream {:?}", s.name.0);
            let line = line_of(text, &s.source);
            let src = s.source.get_mut();
            src.line = line;
            let engine = src.engine.as_str();
            src.options
                .locate(text, "streams.source", engine, stream, line);
            let origin = SourceOrigin {
                engine: Some(src.engine),
                database: src.options.text("database"),
            };
            for d in &mut s.destinations {
                let line = line_of(text, d);
                let d = d.get_mut();
                d.line = line;
                d.source = origin.clone();
                let owner = format!("destination {:?}", d.name.0);
                let engine = d.engine.as_str();
                d.options
                    .locate(text, "streams.destinations", engine, owner, line);
            }
        }
    }

    fn validate(&self, text: &str) -> Result<(), String> {
        self.state_location()
            .map_err(|e| format!("state.url: {e}"))?;
        let lease = self.state.lease_timeout.0;
        if lease < std::time::Duration::from_secs(1) {
            return Err("state.lease_timeout must be at least 1s".into());
        }
        if self.state.heartbeat() * 2 > lease || self.state.heartbeat().is_zero() {
            return Err(format!(
                "state.heartbeat must be above zero and at most half of state.lease_timeout ({lease:?}), \
                 so a lease is renewed at least twice before it expires"
            ));
        }
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
                validate_destination(d.get_ref())?;
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

/// What every destination must say, whatever its engine.
fn validate_destination(d: &DestinationConfig) -> Result<(), String> {
    let at = d.line;
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

    use super::testing::GOOD;

    #[test]
    fn parses_a_good_config_with_defaults() {
        let c = Config::parse(GOOD, "t.toml").unwrap();
        let s = c.stream("orders").unwrap();
        assert_eq!(s.batch.max_records, 1000);
        let d = s.destinations[0].get_ref();
        assert_eq!(d.retry.max_attempts, 3);
        assert_eq!(d.retry.initial_backoff.0.as_millis(), 10);
        assert!(d.enabled);
        assert_eq!(c.server.listen.as_str(), "127.0.0.1:8480");
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn lease_settings_default_and_are_checked() {
        let c = Config::parse(GOOD, "t.toml").unwrap();
        assert_eq!(c.state.lease_timeout.0.as_secs(), 10);
        assert_eq!(c.state.heartbeat().as_millis(), 3333);
        let with = |state: &str| format!("{GOOD}\n[state]\n{state}\n");
        let c = Config::parse(&with("lease_timeout = \"6s\"\nheartbeat = \"1s\""), "t").unwrap();
        assert_eq!(c.state.heartbeat().as_secs(), 1);
        let e = Config::parse(&with("lease_timeout = \"4s\"\nheartbeat = \"3s\""), "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("state.heartbeat must be above zero and at most half"),
            "{e}"
        );
        let e = Config::parse(&with("lease_timeout = \"500ms\""), "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("state.lease_timeout must be at least 1s"), "{e}");
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Local {
        format: String,
        prefix: Option<String>,
    }

    fn first_destination(text: &str) -> DestinationConfig {
        let c = Config::parse(text, "t.toml").unwrap();
        c.streams[0].get_ref().destinations[0].get_ref().clone()
    }

    #[test]
    fn engine_keys_are_kept_for_the_engine_with_their_lines() {
        let c = Config::parse(GOOD, "t.toml").unwrap();
        let s = c.stream("orders").unwrap();
        let d = s.destinations[0].get_ref();
        assert_eq!(d.line, 10);
        assert_eq!(d.options.keys().collect::<Vec<_>>(), ["format"]);
        let src = s.source.get_ref();
        assert_eq!(src.line, 6);
        assert_eq!(src.options.keys().collect::<Vec<_>>(), ["path"]);
        let local: Local = d.options.parse().unwrap();
        assert_eq!((local.format.as_str(), local.prefix), ("csv.gz", None));
    }

    #[test]
    fn an_engine_key_error_names_key_engine_and_line() {
        let bad = GOOD.replace("format = \"csv.gz\"", "formatt = \"csv.gz\"");
        let e = first_destination(&bad)
            .options
            .parse::<Local>()
            .unwrap_err();
        assert_eq!(
            e,
            "line 14: streams.destinations.formatt: not a key of engine \"local\" \
             (destination \"lake\"); its keys are format, prefix"
        );
        let bad = GOOD.replace("\"csv.gz\"", "7");
        let e = first_destination(&bad)
            .options
            .parse::<Local>()
            .unwrap_err();
        assert!(
            e.starts_with("line 14, column 10: streams.destinations.format: "),
            "{e}"
        );
        let bad = GOOD.replace("format = \"csv.gz\"", "prefix = \"p\"");
        let e = first_destination(&bad)
            .options
            .parse::<Local>()
            .unwrap_err();
        assert_eq!(
            e,
            "line 10: streams.destinations.format is required for engine \"local\" \
             (destination \"lake\")"
        );
    }

    #[test]
    fn split_options_list_every_key_of_the_engine() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Shared {
            format: Option<String>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Own {
            region: Option<String>,
        }
        let text = GOOD.replace("engine = \"local\"", "engine = \"s3\"\nregion = \"r\"");
        let d = first_destination(&text);
        let (shared, own) = d.options.parse_split::<Shared, Own>().unwrap();
        assert_eq!(shared.format.as_deref(), Some("csv.gz"));
        assert_eq!(own.region.as_deref(), Some("r"));
        let text = text.replace("region =", "partition_key =");
        let e = first_destination(&text)
            .options
            .parse_split::<Shared, Own>()
            .unwrap_err();
        assert_eq!(
            e,
            "line 13: streams.destinations.partition_key: not a key of engine \"s3\" \
             (destination \"lake\"); its keys are format, region"
        );
    }

    #[test]
    fn option_values_never_show_in_debug_nor_multi_line_ones_in_errors() {
        let text = GOOD.replace(
            "format = \"csv.gz\"",
            "token = \"tok3n-S3CRET\"\nflag = '''\nswallowed = \"S3CRET\"'''",
        );
        let c = Config::parse(&text, "t.toml").unwrap();
        assert!(!format!("{c:?}").contains("S3CRET"), "{c:?}");
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Own {
            token: String,
            flag: bool,
        }
        let e = first_destination(&text).options.parse::<Own>().unwrap_err();
        assert!(!e.contains("S3CRET"), "{e}");
        assert!(
            e.starts_with(
                "line 15, column 8: streams.destinations.flag: \
                 a multi-line value (not shown), expected a boolean"
            ),
            "{e}"
        );
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let bad = GOOD.replace("max_attempts = 3", "max_attemptz = 3");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("max_attemptz"), "{e}");
        assert!(e.contains("line 17"), "{e}");
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let bad = GOOD.replace("\"10ms\"", "\"ten\"");
        let e = Config::parse(&bad, "t.toml").unwrap_err().to_string();
        assert!(e.contains("line 18"), "{e}");
        assert!(e.contains("initial_backoff"), "{e}");
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
