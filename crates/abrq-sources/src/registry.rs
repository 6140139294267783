//! Every source engine in one table: how its config is checked (without
//! I/O), how a source is made from it, and whether it backfills. The one
//! `match` below is exhaustive, so a new engine in the config model does
//! not compile until it is placed here.

use std::time::Duration;

use abrq_core::config::{SourceConfig, SourceEngine};

use crate::error::{Failure, SourceError};
use crate::file::{FileOptions, FileSource};
use crate::generate::{GenerateOptions, GenerateSource};
use crate::http::HttpOptions;
use crate::mysql::{self, MysqlCdcSource, MysqlCursorSource, MysqlSettings};
use crate::per_table::Shaped;
use crate::postgres::{self, PgCdcSource, PgCursorSource, PostgresSettings};
use crate::source::{Blocking, Pace, Source, SourceSpec};

/// How often a file (followed or not) and the generator are read again
/// after their end.
const FILE_POLL: Duration = Duration::from_millis(200);

type Open = fn(&SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError>;

/// What one source engine is.
struct Engine {
    /// Its own keys, checked without I/O.
    check: fn(&SourceConfig) -> Result<(), String>,
    /// The source, at the stored cursor (only for an engine that
    /// `SourceEngine::pulled()` says is read by a source task).
    open: Open,
    /// Whether `abrq backfill` can read a table again while it streams.
    backfills: fn(&SourceConfig) -> bool,
    /// Whether `abrq check` connects to it (a server; a file is read
    /// when the stream runs).
    probed: bool,
}

fn engine(e: SourceEngine) -> Engine {
    match e {
        SourceEngine::File => Engine {
            check: |c| FileOptions::from_config(c).map(drop),
            open: open_file,
            backfills: |_| false,
            probed: false,
        },
        SourceEngine::Generate => Engine {
            check: |c| GenerateOptions::from_config(c).map(drop),
            open: open_generate,
            backfills: |_| false,
            probed: false,
        },
        SourceEngine::Http => Engine {
            check: |c| HttpOptions::from_config(c).map(drop),
            open: not_pulled,
            backfills: |_| false,
            probed: false,
        },
        SourceEngine::Postgres => Engine {
            check: |c| PostgresSettings::from_config(c).map(drop),
            open: open_postgres,
            backfills: |c| {
                PostgresSettings::from_config(c).is_ok_and(|s| s.mode == postgres::Mode::Cdc)
            },
            probed: true,
        },
        SourceEngine::Mysql => Engine {
            check: |c| MysqlSettings::from_config(c).map(drop),
            open: open_mysql,
            backfills: |c| MysqlSettings::from_config(c).is_ok_and(|s| s.mode == mysql::Mode::Cdc),
            probed: true,
        },
    }
}

/// Checks one source's own keys.
pub fn check(cfg: &SourceConfig) -> Result<(), String> {
    (engine(cfg.engine).check)(cfg)
}

/// Makes the source `spec` describes: the [`crate::SourceFactory`] the
/// binary gives the engine.
pub fn open(spec: &SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError> {
    (engine(spec.config.engine).open)(spec)
}

/// Whether `abrq check` connects to the source.
pub fn probed(cfg: &SourceConfig) -> bool {
    engine(cfg.engine).probed
}

/// Whether the source can read a table again while it streams.
pub fn backfills(cfg: &SourceConfig) -> bool {
    (engine(cfg.engine).backfills)(cfg)
}

fn invalid(e: String) -> SourceError {
    SourceError::new(Failure::Invalid, e)
}

/// HTTP ingest is sent its records: there is nothing to read.
fn not_pulled(spec: &SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError> {
    Err(SourceError::new(
        Failure::Invalid,
        format!(
            "a {} source is not read by abrq: its records are sent to it",
            spec.config.engine.as_str()
        ),
    ))
}

fn open_file(spec: &SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError> {
    let src = FileSource::from_config(spec.config, spec.cursor)?;
    let pace = match src.follows() {
        true => Pace::forever(FILE_POLL),
        false => Pace::until_end(FILE_POLL),
    };
    let what = src.path().display().to_string();
    Ok(Box::new(Blocking::new(src, what, pace)))
}

fn open_generate(spec: &SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError> {
    let src = GenerateSource::from_config(spec.config, spec.cursor)?;
    Ok(Box::new(Blocking::new(
        src,
        "generate".into(),
        Pace::until_end(FILE_POLL),
    )))
}

fn open_postgres(spec: &SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError> {
    let settings = PostgresSettings::from_config(spec.config).map_err(invalid)?;
    let per_table = settings.per_table.clone();
    let source: Box<dyn Source> = match settings.mode {
        postgres::Mode::Cursor => Box::new(PgCursorSource::new(settings, spec.cursor)?),
        postgres::Mode::Cdc => Box::new(PgCdcSource::open(settings, spec)?),
    };
    Ok(Shaped::wrap(source, per_table))
}

fn open_mysql(spec: &SourceSpec<'_>) -> Result<Box<dyn Source>, SourceError> {
    let settings = MysqlSettings::from_config(spec.config).map_err(invalid)?;
    let per_table = settings.per_table.clone();
    let source: Box<dyn Source> = match settings.mode {
        mysql::Mode::Cursor => Box::new(MysqlCursorSource::new(settings, spec.cursor)?),
        mysql::Mode::Cdc => Box::new(MysqlCdcSource::open(settings, spec)?),
    };
    Ok(Shaped::wrap(source, per_table))
}
