//! An engine's own keys. Core knows the keys every source and destination
//! has; the rest of the table is kept here as written, with its lines, for
//! the engine's config (in `abrq-sinks` or `abrq-sources`, beside the
//! engine) to read into its own `#[serde(deny_unknown_fields)]` struct with
//! [`Options::parse`]. Every error names the key, the engine and the line,
//! like any other config error, and never quotes a value that ran over
//! several lines (it may have swallowed a secret).

use std::fmt;
use std::ops::Range;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor,
};

/// The keys of one table that belong to its engine.
#[derive(Clone, Default)]
pub struct Options {
    entries: Vec<Entry>,
    at: Context,
}

#[derive(Clone)]
struct Entry {
    key: String,
    value: toml::Value,
    span: Range<usize>,
    line: usize,
    column: usize,
    /// The value as written runs over several lines.
    lines: bool,
}

/// Where the table is, for messages.
#[derive(Clone, Default)]
struct Context {
    /// `streams.destinations` or `streams.source`.
    table: &'static str,
    engine: &'static str,
    /// `destination "lake"`, `stream "orders"`.
    owner: String,
    /// The table's own line.
    line: usize,
}

/// Values are not shown: one may be a secret.
impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.keys()).finish()
    }
}

impl Options {
    pub(super) fn insert(&mut self, key: String, value: toml::Spanned<toml::Value>) {
        let span = value.span();
        self.entries.push(Entry {
            key,
            value: value.into_inner(),
            span,
            line: 0,
            column: 0,
            lines: false,
        });
    }

    /// Fills in lines and names once the whole text is parsed.
    pub(super) fn locate(
        &mut self,
        text: &str,
        table: &'static str,
        engine: &'static str,
        owner: String,
        line: usize,
    ) {
        self.entries.sort_by_key(|e| e.span.start);
        for e in &mut self.entries {
            (e.line, e.column) = position(text, e.span.start);
            e.lines = text
                .get(e.span.clone())
                .is_none_or(|written| written.contains('\n'));
        }
        self.at = Context {
            table,
            engine,
            owner,
            line,
        };
    }

    /// The keys, in the order they are written.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.key.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `key`'s value when it is a string, its `${VAR}`s filled in.
    pub fn text(&self, key: &str) -> Option<String> {
        let e = self.entries.iter().find(|e| e.key == key)?;
        e.value
            .as_str()
            .and_then(|raw| super::values::interpolate(raw).ok())
    }

    /// The line `key` is written on, for an engine's own checks.
    pub fn line_of(&self, key: &str) -> Option<usize> {
        self.entries.iter().find(|e| e.key == key).map(|e| e.line)
    }

    /// Every key, read into `T`, a struct with `deny_unknown_fields`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        let all: Vec<&Entry> = self.entries.iter().collect();
        T::deserialize(Table(&all)).map_err(|f| self.describe(f, &[]))
    }

    /// For an engine whose keys are a shared set `S` (the object keys)
    /// and its own `T`: the keys `S` names read into `S`, the rest into
    /// `T`, which lists both sets when it meets a key of neither.
    pub fn parse_split<S: DeserializeOwned, T: DeserializeOwned>(&self) -> Result<(S, T), String> {
        let shared = fields_of::<S>();
        let (mine, rest): (Vec<&Entry>, Vec<&Entry>) = self
            .entries
            .iter()
            .partition(|e| shared.contains(&e.key.as_str()));
        let s = S::deserialize(Table(&mine)).map_err(|f| self.describe(f, &[]))?;
        let t = T::deserialize(Table(&rest)).map_err(|f| self.describe(f, shared))?;
        Ok((s, t))
    }

    /// `line 12: streams.destinations.partition_key: ...`
    fn describe(&self, f: Fault, shared: &[&str]) -> String {
        let Context {
            table,
            engine,
            owner,
            line,
        } = &self.at;
        match (f.at, f.kind) {
            (_, Kind::Missing(key)) => {
                format!("line {line}: {table}.{key} is required for engine {engine:?} ({owner})")
            }
            (Some(at), Kind::Unknown(own)) => {
                let keys: Vec<&str> = shared.iter().chain(own).copied().collect();
                let keys = match keys.is_empty() {
                    true => "it takes none besides the common ones".to_string(),
                    false => format!("its keys are {}", keys.join(", ")),
                };
                format!(
                    "line {}: {table}.{}: not a key of engine {engine:?} ({owner}); {keys}",
                    at.line, at.key
                )
            }
            (Some(at), Kind::Message(m)) => format!(
                "line {}, column {}: {table}.{}: {m}",
                at.line, at.column, at.key
            ),
            (None, Kind::Message(m)) => format!("line {line}: {table}: {m}"),
            (None, Kind::Unknown(_) | Kind::Fields(_)) | (Some(_), Kind::Fields(_)) => {
                format!("line {line}: {table}: cannot read the keys of engine {engine:?}")
            }
        }
    }
}

/// 1-based line and column of byte `at`.
pub(super) fn position(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..at].bytes().filter(|b| *b == b'\n').count() + 1;
    (line, text[line_start..at].chars().count() + 1)
}

/// The field names of struct `T`, as serde's derive declares them.
fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(FieldNames) {
        Err(Fault {
            kind: Kind::Fields(fields),
            ..
        }) => fields,
        _ => &[],
    }
}

/// A failure while reading options: what, and at which key.
#[derive(Debug)]
struct Fault {
    at: Option<At>,
    kind: Kind,
}

#[derive(Debug)]
struct At {
    key: String,
    line: usize,
    column: usize,
}

#[derive(Debug)]
enum Kind {
    /// A key the struct does not have; its own keys.
    Unknown(&'static [&'static str]),
    Missing(&'static str),
    Message(String),
    /// Not a failure: what [`FieldNames`] learned.
    Fields(&'static [&'static str]),
}

impl Fault {
    fn new(kind: Kind) -> Self {
        Fault { at: None, kind }
    }

    /// Pins a fault raised while reading `e` on it, unless it has a key.
    fn at(mut self, e: &Entry) -> Self {
        self.at.get_or_insert_with(|| At {
            key: e.key.clone(),
            line: e.line,
            column: e.column,
        });
        self
    }

    /// A TOML type error on `e`'s value. serde quotes the value it
    /// rejects; a value written over several lines may hold lines a typo
    /// made it swallow (`tls = '''`), secrets among them.
    fn value(e: &Entry, err: toml::de::Error) -> Self {
        let mut message = err.message().to_string();
        if e.lines && message.contains(['"', '`']) {
            message = match message.split_once(", expected ") {
                Some((_, expected)) => {
                    format!("a multi-line value (not shown), expected {expected}")
                }
                None => "a multi-line value (not shown) that is not valid here".into(),
            };
        }
        Fault::new(Kind::Message(message)).at(e)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Unknown(_) => f.write_str("unknown key"),
            Kind::Missing(key) => write!(f, "{key} is required"),
            Kind::Message(m) => f.write_str(m),
            Kind::Fields(_) => f.write_str("field names"),
        }
    }
}

impl std::error::Error for Fault {}

impl de::Error for Fault {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Fault::new(Kind::Message(msg.to_string()))
    }

    fn unknown_field(_: &str, expected: &'static [&'static str]) -> Self {
        Fault::new(Kind::Unknown(expected))
    }

    fn missing_field(field: &'static str) -> Self {
        Fault::new(Kind::Missing(field))
    }
}

/// Some of a table's entries, as a map to deserialize from.
struct Table<'a>(&'a [&'a Entry]);

impl<'de> Deserializer<'de> for Table<'_> {
    type Error = Fault;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fault> {
        visitor.visit_map(Entries {
            rest: self.0.iter(),
            current: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct Entries<'a, I> {
    rest: I,
    current: Option<&'a Entry>,
}

impl<'de, 'a, I: Iterator<Item = &'a &'a Entry>> MapAccess<'de> for Entries<'a, I> {
    type Error = Fault;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Fault> {
        let Some(e) = self.rest.next() else {
            return Ok(None);
        };
        self.current = Some(e);
        let key: de::value::StrDeserializer<'_, Fault> = e.key.as_str().into_deserializer();
        seed.deserialize(key).map(Some).map_err(|f| f.at(e))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Fault> {
        let e = self.current.take().expect("a value follows its key");
        seed.deserialize(e.value.clone())
            .map_err(|err| Fault::value(e, err))
    }
}

/// Learns a struct's field names: serde's derive hands them to
/// `deserialize_struct`.
struct FieldNames;

impl<'de> Deserializer<'de> for FieldNames {
    type Error = Fault;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Fault> {
        Err(Fault::new(Kind::Fields(fields)))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fault> {
        Err(Fault::new(Kind::Fields(&[])))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}
