//! A spooled batch that a destination takes as its lines
//! (`Batch::lines`): each line with where it stands, its failures worded
//! alike by every destination, an object written with names added, and
//! the batch decoded after all (a line of the first format, a schema or
//! marker the destination writes from items).

use std::io::{self, Write};

use abrq_core::lines::{Line, LineError};
use abrq_core::{Batch, DeliveryError, Op};

use crate::failure::Failure;

/// The batch of `bytes`' items; a line that cannot be decoded is an
/// `encoding` failure worded as the spool words it.
pub fn decoded(batch: &Batch, bytes: &[u8]) -> Result<Batch, DeliveryError> {
    let items = abrq_core::lines::decode(bytes).map_err(|e| {
        let said = abrq_core::lines::undecodable(batch.meta.seq, &e);
        Failure::Encoding { record: None }.error(said)
    })?;
    Ok(Batch::new(batch.meta.clone(), items))
}

/// A spooled batch's lines with where each stands: an unreadable one is
/// already its `encoding` failure.
pub fn lines(
    seq: u64,
    bytes: &[u8],
) -> impl Iterator<Item = (LineAt, Result<Line<'_>, DeliveryError>)> {
    abrq_core::lines::lines(bytes)
        .enumerate()
        .map(move |(index, (number, line))| {
            let at = LineAt { seq, index, number };
            (at, line.map_err(|e| at.unreadable(&e)))
        })
}

/// Where a line of spooled batch `seq` stands: item `index`, line
/// `number`. Its failures are `encoding` failures naming the item.
#[derive(Debug, Clone, Copy)]
pub struct LineAt {
    pub seq: u64,
    pub index: usize,
    pub number: usize,
}

impl LineAt {
    /// A line that cannot be read, worded as the spool words it.
    pub fn unreadable(self, e: &LineError) -> DeliveryError {
        self.fail(abrq_core::lines::undecodable(self.seq, e))
    }

    /// The line's JSON cannot be read.
    pub fn json(self, source: serde_json::Error) -> DeliveryError {
        let line = self.number;
        self.unreadable(&LineError::Json { line, source })
    }

    /// What is wrong with the item, as said.
    pub fn fail(self, said: String) -> DeliveryError {
        let record = Some(self.index);
        Failure::Encoding { record }.error(said)
    }

    /// What is wrong with the item, naming its line.
    pub fn refuse(self, said: String) -> DeliveryError {
        self.fail(format!("line {}: {said}", self.number))
    }
}

/// Writes a checked JSON object with the `added` names that are some
/// (each with its value's JSON text) before its closing brace;
/// `has_fields` says whether the object has fields of its own.
pub fn object_with(
    out: &mut impl Write,
    object: &[u8],
    has_fields: bool,
    added: &[Option<(&str, &str)>],
) -> io::Result<()> {
    if added.iter().all(Option::is_none) {
        return out.write_all(object);
    }
    // a checked object ends in its closing brace
    out.write_all(&object[..object.len() - 1])?;
    let mut comma = has_fields;
    for (name, value) in added.iter().flatten() {
        if comma {
            out.write_all(b",")?;
        }
        write!(out, "\"{name}\":{value}")?;
        comma = true;
    }
    out.write_all(b"}")
}

/// The `_abrq_op` value a record's object gets added, as JSON text: none
/// for an insert (or a read).
pub fn op_value(op: Op) -> Option<&'static str> {
    match op {
        Op::Update => Some("\"update\""),
        Op::Delete => Some("\"delete\""),
        Op::Insert | Op::Read => None,
    }
}
