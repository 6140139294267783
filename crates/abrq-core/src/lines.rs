//! The spool's lines read without decoding them: what each line is, and a
//! record's object checked and its top-level names read, with nothing
//! built. A destination that writes records as JSON copies the object as
//! it is (`Batch::lines`); the spool's own codec (`abrq_state::payload`)
//! writes the lines and decodes them into items.
//!
//! A line is one tag byte and JSON: `I`, `U`, `D`, `R` a record (insert,
//! update, delete, read), `N` the table of the items after it, `S` its
//! columns, `T` a truncate, `M` a transaction marker. A line that starts
//! with `{` is the first format (an item's own serde form).

use std::fmt;

use serde::de::{Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};

use crate::record::{Item, Op, Record, TableRef};

/// One line of a payload, its tag read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Line<'a> {
    Record {
        op: Op,
        object: &'a [u8],
    },
    Table(&'a [u8]),
    Schema(&'a [u8]),
    Truncate,
    Marker(&'a [u8]),
    /// The first format: decode it as an item.
    Item(&'a [u8]),
}

/// Why a line cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("line {line}: {source}")]
    Json {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: unknown item tag {tag:?}")]
    Tag { line: usize, tag: char },
}

/// How a payload that cannot be read is named, wherever it is met: by the
/// spool's reader, or by a destination that reads the lines itself.
pub fn undecodable(seq: u64, error: &LineError) -> String {
    format!("spool payload of seq {seq} cannot be decoded: {error}")
}

/// The operation a record line's tag says; None for the other tags.
pub fn tag_op(tag: u8) -> Option<Op> {
    match tag {
        b'I' => Some(Op::Insert),
        b'U' => Some(Op::Update),
        b'D' => Some(Op::Delete),
        b'R' => Some(Op::Read),
        _ => None,
    }
}

/// The tag that opens a record's line.
pub fn op_tag(op: Op) -> u8 {
    match op {
        Op::Insert => b'I',
        Op::Update => b'U',
        Op::Delete => b'D',
        Op::Read => b'R',
    }
}

/// The payload's lines in order, each with its 1-based line number; blank
/// lines are skipped.
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, Result<Line<'_>, LineError>)> {
    split_lines(bytes)
        .enumerate()
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
        .map(|(i, l)| (i + 1, line(i + 1, l)))
}

/// `bytes` split at each newline, as `split` would (a last piece after
/// the last newline, empty if it ends the payload), found a word at a time.
pub fn split_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b'\n', r) {
            Some(at) => {
                rest = Some(&r[at + 1..]);
                Some(&r[..at])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

fn line(number: usize, line: &[u8]) -> Result<Line<'_>, LineError> {
    let (&tag, rest) = line.split_first().expect("blank lines are skipped");
    if let Some(op) = tag_op(tag) {
        return Ok(Line::Record { op, object: rest });
    }
    Ok(match tag {
        b'N' => Line::Table(rest),
        b'S' => Line::Schema(rest),
        b'T' if rest.iter().all(u8::is_ascii_whitespace) => Line::Truncate,
        b'M' => Line::Marker(rest),
        b'{' => Line::Item(line),
        other => {
            return Err(LineError::Tag {
                line: number,
                tag: char::from(other),
            })
        }
    })
}

/// Decodes a payload, naming the line that fails.
pub fn decode(bytes: &[u8]) -> Result<Vec<Item>, LineError> {
    let count = bytes.iter().filter(|&&b| b == b'\n').count();
    let mut items = Vec::with_capacity(count + 1);
    for (number, line) in lines(bytes) {
        let json = |source| LineError::Json {
            line: number,
            source,
        };
        let item = match line? {
            Line::Record { op, object } => Item::Record(Record {
                op,
                fields: crate::json::from_slice(object).map_err(json)?,
            }),
            Line::Truncate => Item::Truncate,
            Line::Schema(j) => Item::Schema {
                columns: serde_json::from_slice(j).map_err(json)?,
            },
            Line::Table(j) => Item::Table(serde_json::from_slice(j).map_err(json)?),
            Line::Marker(j) => Item::Marker {
                fields: serde_json::from_slice(j).map_err(json)?,
            },
            Line::Item(j) => crate::json::from_slice::<Item>(j).map_err(json)?,
        };
        items.push(item);
    }
    Ok(items)
}

/// A table line's table.
pub fn table(json: &[u8]) -> serde_json::Result<TableRef> {
    serde_json::from_slice(json)
}

/// What [`names`] learned of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Names {
    /// How many names it has.
    pub len: usize,
    /// Which of the names asked for it has, by their index.
    pub found: u64,
}

impl Names {
    pub fn has(&self, index: usize) -> bool {
        self.found & (1 << index) != 0
    }
}

/// Checks that `json` is one JSON object, of any depth, walking every value
/// as a full parse would but keeping nothing, and says which of `wanted`
/// (at most 64) are among its top-level names.
pub fn names(json: &[u8], wanted: &'static [&'static str]) -> serde_json::Result<Names> {
    names_and_field(json, wanted, None).map(|(names, _)| names)
}

/// [`names`], and the value of the top-level name `field` if it is one of
/// them (the last one, as a decoded map keeps it); only that value is
/// built.
pub fn names_and_field(
    json: &[u8],
    wanted: &'static [&'static str],
    field: Option<&str>,
) -> serde_json::Result<(Names, Option<serde_json::Value>)> {
    // skipped strings are not checked for UTF-8 by the parser
    std::str::from_utf8(json).map_err(serde_json::Error::custom)?;
    crate::json::from_slice_seed(json, Top { wanted, field })
}

struct Top<'f> {
    wanted: &'static [&'static str],
    field: Option<&'f str>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Top<'_> {
    type Value = (Names, Option<serde_json::Value>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = (Names, Option<serde_json::Value>);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut names = Names::default();
        let mut value = None;
        let key = Key {
            wanted: self.wanted,
            field: self.field,
        };
        while let Some((wanted, is_field)) = map.next_key_seed(key)? {
            names.len += 1;
            if let Some(i) = wanted {
                names.found |= 1 << i;
            }
            match is_field {
                true => value = Some(map.next_value::<serde_json::Value>()?),
                false => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((names, value))
    }
}

/// A key: the index of the wanted name it is, if any, and whether it is
/// the field asked for.
#[derive(Clone, Copy)]
struct Key<'f> {
    wanted: &'static [&'static str],
    field: Option<&'f str>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Key<'_> {
    type Value = (Option<usize>, bool);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Key<'_> {
    type Value = (Option<usize>, bool);

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a name")
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        let wanted = self.wanted.iter().position(|w| *w == v);
        Ok((wanted, self.field == Some(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WANTED: &[&str] = &["_abrq_table", "_abrq_op"];

    #[test]
    fn lines_say_their_kind_and_skip_blanks() {
        let text = b"N{\"name\":\"t\"}\nS{}\n\nI{\"a\":1}\n  \nD{}\nT\nM{}\nX{}\n";
        let got: Vec<_> = lines(text).collect();
        assert_eq!(got.len(), 7);
        assert!(matches!(got[0], (1, Ok(Line::Table(_)))));
        assert!(matches!(
            got[2],
            (4, Ok(Line::Record { op: Op::Insert, .. }))
        ));
        assert!(matches!(
            got[3],
            (6, Ok(Line::Record { op: Op::Delete, .. }))
        ));
        assert!(matches!(got[4], (7, Ok(Line::Truncate))));
        assert!(matches!(got[6], (9, Err(LineError::Tag { tag: 'X', .. }))));
    }

    #[test]
    fn names_are_read_at_the_top_only_and_bad_json_is_refused() {
        let n = names(br#"{"a":{"_abrq_op":1},"_abrq_table":"x"}"#, WANTED).unwrap();
        assert_eq!((n.len, n.has(0), n.has(1)), (2, true, false));
        let n = names(br#" { } "#, WANTED).unwrap();
        assert_eq!(n.len, 0);
        let n = names(br#"{"_abrq_\u006fp": [1, 2]}"#, WANTED).unwrap();
        assert!(n.has(1));
        for bad in [
            &b"[1]"[..],
            b"{\"a\":}",
            b"{\"a\":1} x",
            b"{\"a\":\"\xff\"}",
        ] {
            assert!(names(bad, WANTED).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_field_is_read_at_the_top_only_the_last_one_kept() {
        let json = br#"{"k":{"k":1},"n":[1],"k":"v\u0041","_abrq_op":2}"#;
        let (n, v) = names_and_field(json, WANTED, Some("k")).unwrap();
        assert_eq!((n.len, n.has(1)), (4, true));
        assert_eq!(v, Some(serde_json::json!("vA")));
        let (_, v) = names_and_field(br#"{"a":{"k":1}}"#, WANTED, Some("k")).unwrap();
        assert_eq!(v, None);
        assert!(names_and_field(br#"{"k":1,"a":}"#, WANTED, Some("k")).is_err());
    }

    #[test]
    fn names_reads_any_depth() {
        std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(|| {
                let depth = 20_000;
                let text = format!("{{\"a\":{}1{}}}", "[".repeat(depth), "]".repeat(depth));
                assert_eq!(names(text.as_bytes(), WANTED).unwrap().len, 1);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
