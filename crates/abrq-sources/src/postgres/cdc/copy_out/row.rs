//! One row of `COPY ... TO STDOUT` (text format) as the spool's record
//! line: each field's text in the JSON form `row_to_json` gives its type,
//! written straight into the line with nothing parsed or built.

use super::plan::{Form, Plan};

/// The record line of an inserted row: tag, JSON object, newline.
const TAG: u8 = b'I';

/// `row` (one COPY text row, without its newline) as a record line at
/// the end of `out`; `scratch` holds a field while its escapes are undone.
pub(super) fn write_line(
    plan: &Plan,
    row: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    let start = out.len();
    out.push(TAG);
    let mut fields = Fields(Some(row));
    for (name, form) in plan.names.iter().zip(&plan.forms) {
        let Some(field) = fields.next() else {
            out.truncate(start);
            return Err(format!("a row has {} fields", row_fields(row)));
        };
        out.extend_from_slice(name);
        match field {
            b"\\N" => out.extend_from_slice(b"null"),
            _ => write_value(*form, unescaped(field, scratch), out),
        }
    }
    out.extend_from_slice(b"}\n");
    if fields.count() != usize::from(plan.physical) {
        out.truncate(start);
        return Err(format!("a row has {} fields", row_fields(row)));
    }
    Ok(())
}

fn row_fields(row: &[u8]) -> usize {
    Fields(Some(row)).count()
}

/// A row's tab-separated fields, found with memchr (most are short, but
/// a text column's are not).
struct Fields<'a>(Option<&'a [u8]>);

impl<'a> Iterator for Fields<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.0?;
        match memchr::memchr(b'\t', rest) {
            Some(tab) => {
                self.0 = Some(&rest[tab + 1..]);
                Some(&rest[..tab])
            }
            None => self.0.take(),
        }
    }
}

/// The key fields' texts of `row` (the cursor first), for the position.
pub(super) fn key_texts(plan: &Plan, row: &[u8]) -> Result<Vec<String>, String> {
    let fields: Vec<&[u8]> = Fields(Some(row)).collect();
    let mut scratch = Vec::new();
    plan.key
        .iter()
        .map(|&i| {
            let field = fields.get(i).ok_or("a row ends before its key")?;
            if *field == b"\\N" {
                return Err("a key column is null in a row".to_string());
            }
            let text = unescaped(field, &mut scratch);
            String::from_utf8(text.to_vec()).map_err(|_| "a key is not UTF-8".to_string())
        })
        .collect()
}

/// A field's text with COPY's backslash escapes undone (COPY writes
/// `\b \f \n \r \t \v \\` for those bytes).
fn unescaped<'a>(field: &'a [u8], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    if memchr::memchr(b'\\', field).is_none() {
        return field;
    }
    scratch.clear();
    let mut bytes = field.iter();
    while let Some(&b) = bytes.next() {
        if b != b'\\' {
            scratch.push(b);
            continue;
        }
        let Some(&next) = bytes.next() else { break };
        scratch.push(match next {
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 11,
            other => other,
        });
    }
    scratch
}

fn write_value(form: Form, text: &[u8], out: &mut Vec<u8>) {
    match form {
        Form::Number => out.extend_from_slice(text),
        Form::Bool => out.extend_from_slice(match text {
            b"t" => b"true",
            _ => b"false",
        }),
        // NaN and the infinities have no JSON number
        Form::Float => match text.first() {
            Some(b'N' | b'I') | None => quoted(text, out),
            Some(b'-') if text.get(1) == Some(&b'I') => quoted(text, out),
            _ => out.extend_from_slice(text),
        },
        Form::Text => quoted(text, out),
        Form::Timestamp { zoned } => instant(text, zoned, out),
        // a `json` value keeps its input's whitespace; a newline can only
        // be whitespace there (JSON strings hold none), and a line holds none
        Form::Json => out.extend(text.iter().map(|&b| match b {
            b'\n' | b'\r' => b' ',
            b => b,
        })),
    }
}

/// `text` as a JSON string, escaped as PostgreSQL's `escape_json` does.
fn quoted(text: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    // most text needs no escape: it is found eight bytes at a time
    let mut plain = 0;
    for (i, &b) in text.iter().enumerate().skip(plain_prefix(text)) {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            8 => b"\\b",
            12 => b"\\f",
            0..=31 => b"",
            _ => continue,
        };
        out.extend_from_slice(&text[plain..i]);
        match escape.is_empty() {
            true => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            false => out.extend_from_slice(escape),
        }
        plain = i + 1;
    }
    out.extend_from_slice(&text[plain..]);
    out.push(b'"');
}

/// How many of `text`'s first bytes need no escape in a JSON string (no
/// `"`, `\\` or control byte), read a word at a time: a byte below 0x20,
/// or one equal to `"` or `\\` once xor-ed to zero, sets its high bit in
/// `(w - 0x20..) & !w` and `(x - 0x01..) & !x`; the lowest set bit is
/// exact (a borrow only reaches the bytes above it).
fn plain_prefix(text: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    let mut words = text.chunks_exact(8);
    let mut at = 0;
    for word in &mut words {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let control = w.wrapping_sub(ONES * 0x20) & !w;
        let found =
            (control | zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\'))))
                & HIGH;
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let tail = words.remainder();
    at + tail
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
        .unwrap_or(tail.len())
}

/// An ISO timestamp (`2026-12-01 10:47:15.78+00`, ` BC` after a year
/// before 1) in JSON's XSD form, as `row_to_json` writes it:
/// `2026-12-01T10:47:15.78+00:00`.
fn instant(text: &[u8], zoned: bool, out: &mut Vec<u8>) {
    if text.len() < 19 || text[10] != b' ' {
        // infinity, -infinity
        return quoted(text, out);
    }
    let (body, era) = match text.strip_suffix(b" BC") {
        Some(body) => (body, &b" BC"[..]),
        None => (text, &b""[..]),
    };
    out.push(b'"');
    out.extend_from_slice(&body[..10]);
    out.push(b'T');
    out.extend_from_slice(&body[11..]);
    // the offset is the last sign after the time; +HH gains its minutes
    if zoned {
        let sign = body[11..].iter().rposition(|b| matches!(b, b'+' | b'-'));
        if sign.is_some_and(|at| body.len() - (11 + at) == 3) {
            out.extend_from_slice(b":00");
        }
    }
    out.extend_from_slice(era);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(forms: &[Form], row: &str) -> String {
        let names: Vec<String> = (0..forms.len()).map(|i| format!("c{i}")).collect();
        let plan = Plan::for_test(&names, forms.to_vec());
        let mut out = Vec::new();
        write_line(&plan, row.as_bytes(), &mut out, &mut Vec::new()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_form_as_row_to_json_writes_it() {
        use Form::*;
        let forms = [Number, Bool, Float, Float, Text, Json];
        assert_eq!(
            line(
                &forms,
                "-12\tt\t1e+20\t-Infinity\ta\\tb \"q\" \\\\ \\u\t{\"a\": [1,\\n 2]}"
            ),
            "I{\"c0\":-12,\"c1\":true,\"c2\":1e+20,\"c3\":\"-Infinity\",\
             \"c4\":\"a\\tb \\\"q\\\" \\\\ u\",\"c5\":{\"a\": [1,  2]}}\n"
        );
        assert_eq!(
            line(&[Text, Number], "\\N\t\\N"),
            "I{\"c0\":null,\"c1\":null}\n"
        );
        assert_eq!(line(&[Text], "\u{1}é"), "I{\"c0\":\"\\u0001é\"}\n");
    }

    #[test]
    fn the_plain_prefix_stops_at_the_first_escape() {
        let naive = |t: &[u8]| {
            t.iter()
                .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
                .unwrap_or(t.len())
        };
        let mut texts: Vec<Vec<u8>> = vec![b"".to_vec(), "é€ plain text, long enough".into()];
        for at in 0..20 {
            for b in [b'"', b'\\', 0, 0x1f, b'\n'] {
                let mut t = "abcdefghijklmnopqrstu\u{e9}".as_bytes().to_vec();
                t.insert(at, b);
                t.push(b'"');
                texts.push(t);
            }
        }
        for t in texts {
            assert_eq!(plain_prefix(&t), naive(&t), "{t:?}");
        }
        assert_eq!(
            line(&[Form::Text], "abcdefgh\\\\ijkl\"m"),
            "I{\"c0\":\"abcdefgh\\\\ijkl\\\"m\"}\n"
        );
    }

    #[test]
    fn instants_in_xsd_form() {
        let ts = |zoned, text| line(&[Form::Timestamp { zoned }], text);
        assert_eq!(
            ts(true, "2026-12-01 10:47:15.786393+00"),
            "I{\"c0\":\"2026-12-01T10:47:15.786393+00:00\"}\n"
        );
        assert_eq!(
            ts(true, "2026-12-01 10:47:15+05:30"),
            "I{\"c0\":\"2026-12-01T10:47:15+05:30\"}\n"
        );
        assert_eq!(
            ts(true, "0044-03-15 00:00:00+00 BC"),
            "I{\"c0\":\"0044-03-15T00:00:00+00:00 BC\"}\n"
        );
        assert_eq!(
            ts(false, "2026-12-01 10:47:15.5"),
            "I{\"c0\":\"2026-12-01T10:47:15.5\"}\n"
        );
        assert_eq!(ts(true, "infinity"), "I{\"c0\":\"infinity\"}\n");
    }

    #[test]
    fn a_row_of_another_width_is_refused() {
        let plan = Plan::for_test(&["a".into(), "b".into()], vec![Form::Number; 2]);
        let mut out = b"kept".to_vec();
        let e = write_line(&plan, b"1", &mut out, &mut Vec::new()).unwrap_err();
        assert_eq!(e, "a row has 1 fields");
        assert!(write_line(&plan, b"1\t2\t3", &mut out, &mut Vec::new()).is_err());
        assert_eq!(out, b"kept");
    }
}
