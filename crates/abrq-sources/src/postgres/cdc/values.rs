//! pgoutput sends every value in its type's text form; this turns it into
//! the JSON a destination expects, by the column's type oid: numbers and
//! booleans as JSON, json as JSON, instants in RFC 3339, `numeric` as a
//! string of digits (exact), anything else as its text.

use serde_json::{Number, Value};

// the built-in type oids (pg_type.dat); they never change
const BOOL: u32 = 16;
const INT8: u32 = 20;
const INT2: u32 = 21;
const INT4: u32 = 23;
const OID: u32 = 26;
const JSON: u32 = 114;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const JSONB: u32 = 3802;

/// The JSON form of `text`, a value of type `oid`.
pub fn to_json(oid: u32, text: &str) -> Value {
    match oid {
        BOOL => Value::Bool(text == "t"),
        INT2 | INT4 | INT8 | OID => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(text.into())),
        FLOAT4 | FLOAT8 => text
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            // NaN and the infinities have no JSON number
            .unwrap_or_else(|| Value::String(text.into())),
        JSON | JSONB => {
            abrq_core::json::from_str(text).unwrap_or_else(|_| Value::String(text.into()))
        }
        TIMESTAMPTZ => Value::String(rfc3339(text, true)),
        TIMESTAMP => Value::String(rfc3339(text, false)),
        _ => Value::String(text.into()),
    }
}

/// The JSON form of an array's text (`{1,2}`, `{{"a b",NULL}}`,
/// `[0:1]={1,2}`) whose elements are of type `elem`: nested JSON arrays
/// of the elements' own forms, as the copy's `row_to_json` gives them, so
/// a column has one form in copy and stream. Text that is no array
/// literal stays text.
pub fn array_to_json(elem: u32, text: &str) -> Value {
    let body = match text.starts_with('[') {
        // explicit bounds: JSON has none
        true => text.split_once('=').map_or(text, |(_, b)| b),
        false => text,
    };
    let mut parser = ArrayText {
        bytes: body.as_bytes(),
        at: 0,
        elem,
    };
    match parser.array() {
        Some(v) if parser.at == parser.bytes.len() => v,
        _ => Value::String(text.into()),
    }
}

struct ArrayText<'a> {
    bytes: &'a [u8],
    at: usize,
    elem: u32,
}

impl ArrayText<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_spaces(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    /// `{` items `}`.
    fn array(&mut self) -> Option<Value> {
        self.skip_spaces();
        if self.peek()? != b'{' {
            return None;
        }
        self.at += 1;
        let mut out = Vec::new();
        self.skip_spaces();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Value::Array(out));
        }
        loop {
            self.skip_spaces();
            out.push(match self.peek()? {
                b'{' => self.array()?,
                b'"' => {
                    let text = self.quoted()?;
                    to_json(self.elem, &text)
                }
                _ => self.bare()?,
            });
            self.skip_spaces();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(Value::Array(out));
                }
                _ => return None,
            }
        }
    }

    /// `"..."` with `\` escapes.
    fn quoted(&mut self) -> Option<String> {
        self.at += 1;
        let mut raw = Vec::new();
        loop {
            let b = self.peek()?;
            self.at += 1;
            match b {
                b'\\' => {
                    raw.push(self.peek()?);
                    self.at += 1;
                }
                b'"' => return String::from_utf8(raw).ok(),
                _ => raw.push(b),
            }
        }
    }

    /// An unquoted element; `NULL` is null.
    fn bare(&mut self) -> Option<Value> {
        let start = self.at;
        while self.peek().is_some_and(|b| b != b',' && b != b'}') {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at])
            .ok()?
            .trim();
        Some(match text.eq_ignore_ascii_case("NULL") {
            true => Value::Null,
            false => to_json(self.elem, text),
        })
    }
}

/// `2026-12-01 10:47:15.78+00` (ISO DateStyle, the walsender's default)
/// to `2026-12-01T10:47:15.78+00:00`; `infinity` and BC dates stay as
/// they are.
fn rfc3339(text: &str, zoned: bool) -> String {
    let b = text.as_bytes();
    if b.len() < 19 || b[10] != b' ' || text.ends_with(" BC") {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 4);
    out.push_str(&text[..10]);
    out.push('T');
    let rest = &text[11..];
    if !zoned {
        out.push_str(rest);
        return out;
    }
    // the offset is the last + or - ; it may be +HH, +HH:MM or +HH:MM:SS
    match rest.rfind(['+', '-']) {
        Some(at) => {
            let (time, offset) = rest.split_at(at);
            out.push_str(time);
            out.push_str(offset);
            if offset.len() == 3 {
                out.push_str(":00");
            }
        }
        None => out.push_str(rest),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_by_type() {
        assert_eq!(to_json(BOOL, "t"), json!(true));
        assert_eq!(to_json(BOOL, "f"), json!(false));
        assert_eq!(to_json(INT8, "-9223372036854775808"), json!(i64::MIN));
        assert_eq!(to_json(FLOAT8, "1.5"), json!(1.5));
        assert_eq!(to_json(FLOAT8, "NaN"), json!("NaN"));
        assert_eq!(
            to_json(1700, "12345678901234567890.01"),
            json!("12345678901234567890.01")
        );
        assert_eq!(to_json(JSONB, "{\"a\": [1, 2]}"), json!({"a": [1, 2]}));
        assert_eq!(to_json(1082, "2026-12-01"), json!("2026-12-01"));
        assert_eq!(to_json(25, "text"), json!("text"));
    }

    #[test]
    fn arrays_become_json_arrays_of_their_elements() {
        assert_eq!(array_to_json(INT4, "{1,2,NULL}"), json!([1, 2, null]));
        assert_eq!(
            array_to_json(INT4, "{{1,2},{3,4}}"),
            json!([[1, 2], [3, 4]])
        );
        assert_eq!(array_to_json(INT4, "[0:1]={5,6}"), json!([5, 6]));
        assert_eq!(array_to_json(INT4, "{}"), json!([]));
        assert_eq!(
            array_to_json(25, r#"{"a b","q\"uote","back\\slash",NULL,"NULL",plain}"#),
            json!(["a b", "q\"uote", "back\\slash", null, "NULL", "plain"])
        );
        assert_eq!(array_to_json(BOOL, "{t,f}"), json!([true, false]));
        assert_eq!(array_to_json(JSONB, r#"{"{\"a\": 1}"}"#), json!([{"a": 1}]));
        assert_eq!(array_to_json(INT4, "{1,2"), json!("{1,2"));
    }

    #[test]
    fn instants_become_rfc3339() {
        assert_eq!(
            to_json(TIMESTAMPTZ, "2026-12-01 10:47:15.786393+00"),
            json!("2026-12-01T10:47:15.786393+00:00")
        );
        assert_eq!(
            to_json(TIMESTAMPTZ, "2026-12-01 10:47:15+05:30"),
            json!("2026-12-01T10:47:15+05:30")
        );
        assert_eq!(
            to_json(TIMESTAMPTZ, "2026-12-01 10:47:15-08"),
            json!("2026-12-01T10:47:15-08:00")
        );
        assert_eq!(
            to_json(TIMESTAMP, "2026-12-01 10:47:15.5"),
            json!("2026-12-01T10:47:15.5")
        );
        assert_eq!(to_json(TIMESTAMPTZ, "infinity"), json!("infinity"));
    }
}
