//! The `file` source: NDJSON or CSV with a header, read from a byte offset.
//! With `follow`, the file is tailed and only complete lines (CSV: complete
//! records) are consumed.
//! Reads are blocking; the engine runs them on a blocking thread.

mod config;
mod csv_rows;
mod cursor;
mod ndjson;

pub use config::{FileFormat, FileOptions, DEFAULT_NULL_VALUES};
pub use cursor::FileCursor;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use abrq_core::config::SourceConfig;

use crate::chunk::{Chunk, Limits};
use crate::error::{Failure, SourceError};

pub struct FileSource {
    path: PathBuf,
    format: FileFormat,
    follow: bool,
    cursor: FileCursor,
    /// CSV column names, read once from the first line.
    header: Option<Vec<String>>,
    /// CSV cells that, unquoted, mean null.
    null_values: Vec<String>,
}

impl FileSource {
    /// The file `cfg` describes, at `cursor`, with its format and null
    /// markers.
    pub fn from_config(
        cfg: &SourceConfig,
        cursor: Option<&str>,
    ) -> Result<FileSource, SourceError> {
        let o = FileOptions::from_config(cfg).map_err(|e| SourceError::new(Failure::Invalid, e))?;
        let src = FileSource::open(o.path.as_str().as_ref(), o.format(), o.follow, cursor)?;
        Ok(src.with_null_values(o.null_values()))
    }

    /// Opens at `cursor` (from the state store) or at the start. A cursor
    /// whose fingerprint no longer matches means the file was replaced:
    /// reading starts over, with a warning.
    pub fn open(
        path: &Path,
        format: FileFormat,
        follow: bool,
        cursor: Option<&str>,
    ) -> Result<FileSource, SourceError> {
        let mut src = FileSource {
            path: path.to_path_buf(),
            format,
            follow,
            cursor: FileCursor {
                offset: 0,
                lines: 0,
                fp: String::new(),
                fp_len: 0,
            },
            header: None,
            null_values: DEFAULT_NULL_VALUES.iter().map(|s| s.to_string()).collect(),
        };
        if let Some(raw) = cursor {
            let saved =
                FileCursor::decode(raw).map_err(|e| src.bad(0, format!("bad cursor: {e}")))?;
            let mut f = src.open_file()?;
            let len = f.metadata().map_err(|e| src.io(e))?.len();
            let same = len >= saved.offset
                && len >= saved.fp_len
                && cursor::fingerprint_prefix(&mut f, saved.fp_len)
                    .map_err(|e| src.io(e))?
                    .0
                    == saved.fp;
            if same {
                src.cursor = saved;
            } else {
                tracing::warn!(path = %path.display(), "file changed since the last cursor; reading it from the start");
            }
        }
        Ok(src)
    }

    /// Sets the CSV null markers (the default is [`DEFAULT_NULL_VALUES`]).
    pub fn with_null_values(mut self, markers: Vec<String>) -> Self {
        self.null_values = markers;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file is tailed once read to its end.
    pub fn follows(&self) -> bool {
        self.follow
    }

    pub fn cursor(&self) -> &FileCursor {
        &self.cursor
    }

    fn read_complete(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if self.follow && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Chunk {
                    at_end: true,
                    ..Chunk::default()
                })
            }
            Err(e) => return Err(self.io(e)),
        };
        let len = file.metadata().map_err(|e| self.io(e))?.len();
        if len < self.cursor.offset {
            tracing::warn!(path = %self.path.display(), "file shrank below the cursor; reading it from the start");
            self.cursor.offset = 0;
            self.cursor.lines = 0;
            self.header = None;
        }
        // Only complete lines count while tailing: a writer may be mid-line.
        // CSV finds its own record ends, as a quoted field may hold newlines.
        let end = if self.follow && self.format == FileFormat::Ndjson {
            last_newline_end(&mut file, self.cursor.offset, len).map_err(|e| self.io(e))?
        } else {
            len
        };
        if self.cursor.fp_len < cursor::fingerprint_len(len) {
            let (fp, fp_len) = cursor::fingerprint(&mut file, len).map_err(|e| self.io(e))?;
            self.cursor.fp = fp;
            self.cursor.fp_len = fp_len;
        }
        let mut chunk = match self.format {
            FileFormat::Ndjson => self.read_ndjson(&mut file, end, limits)?,
            FileFormat::Csv => self.read_csv(&mut file, end, limits)?,
        };
        chunk.cursor = Some(self.cursor.encode());
        Ok(chunk)
    }

    fn read_ndjson(
        &mut self,
        file: &mut File,
        end: u64,
        limits: Limits,
    ) -> Result<Chunk, SourceError> {
        file.seek(SeekFrom::Start(self.cursor.offset))
            .map_err(|e| self.io(e))?;
        let mut reader = BufReader::with_capacity(256 << 10, file.take(end - self.cursor.offset));
        let mut chunk = Chunk::default();
        let mut line = Vec::with_capacity(512);
        loop {
            if chunk.is_full(limits) {
                return Ok(chunk);
            }
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| self.io(e))?;
            if n == 0 {
                chunk.at_end = true;
                return Ok(chunk);
            }
            let body = trim_eol(&line);
            let line_no = self.cursor.lines + 1;
            if !body.iter().all(u8::is_ascii_whitespace) {
                ndjson::keep_line(body, &mut chunk.kept).map_err(|m| self.bad(line_no, m))?;
                chunk.records += 1;
                chunk.bytes += body.len() as u64;
            }
            self.cursor.lines += 1;
            self.cursor.offset += n as u64;
        }
    }

    fn open_file(&self) -> Result<File, SourceError> {
        File::open(&self.path).map_err(|e| self.io(e))
    }

    fn io(&self, source: std::io::Error) -> SourceError {
        SourceError::from_client("", source).at(self.path.display().to_string())
    }

    fn bad(&self, line: u64, message: String) -> SourceError {
        SourceError::new(Failure::BadRecord, message).at(format!("{}:{line}", self.path.display()))
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The offset just past the last newline in [from, len), or `from` if none.
fn last_newline_end(file: &mut File, from: u64, len: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 << 10;
    let mut hi = len;
    let mut buf = vec![0u8; BLOCK as usize];
    while hi > from {
        let lo = hi.saturating_sub(BLOCK).max(from);
        let n = (hi - lo) as usize;
        file.seek(SeekFrom::Start(lo))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(lo + i as u64 + 1);
        }
        hi = lo;
    }
    Ok(from)
}

impl crate::source::ReadChunk for FileSource {
    /// Reads up to `limits` of complete records after the cursor.
    fn read_chunk(&mut self, limits: Limits) -> Result<Chunk, SourceError> {
        self.read_complete(limits)
    }
}

#[cfg(test)]
mod tests;
