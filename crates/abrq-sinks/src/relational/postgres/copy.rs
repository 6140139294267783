//! Appended rows go in with `COPY ... FROM STDIN` (text format) inside the
//! batch's transaction: the server's bulk path parses each value with its
//! column's own input function, as the unnest statement's casts do, at a
//! fraction of the per-row cost. Upserts and deletes keep their
//! statements; a refused row is still named by the one-row-per-statement
//! pass, which uses INSERT.

use chrono::SecondsFormat;
use sqlx::PgConnection;

use super::D;
use crate::relational::plan::Row;
use crate::relational::table::TableInfo;
use crate::relational::types::Cell;

/// Bytes handed to the server per message.
const SEND_BYTES: usize = 1 << 20;

/// Copies runs of rows (their cells at `columns`' positions) into `table`,
/// in order, as one `COPY`.
pub async fn copy_rows(
    conn: &mut PgConnection,
    table: &str,
    t: &TableInfo,
    columns: &[usize],
    runs: &[&[Row<'_>]],
) -> Result<(), sqlx::Error> {
    let names: Vec<String> = columns
        .iter()
        .map(|&c| D.quote(&t.columns[c].name))
        .collect();
    let sql = format!("COPY {table} ({}) FROM STDIN", names.join(", "));
    let mut copy = conn.copy_in_raw(&sql).await?;
    let mut buf = Vec::with_capacity(SEND_BYTES + (64 << 10));
    for row in runs.iter().flat_map(|run| run.iter()) {
        for (i, cell) in row.cells.iter().take(columns.len()).enumerate() {
            if i > 0 {
                buf.push(b'\t');
            }
            write_cell(&mut buf, cell);
        }
        buf.push(b'\n');
        if buf.len() >= SEND_BYTES {
            if let Err(e) = copy.send(std::mem::take(&mut buf)).await {
                let _ = copy.abort("abrq stopped sending").await;
                return Err(e);
            }
        }
    }
    if !buf.is_empty() {
        if let Err(e) = copy.send(buf).await {
            let _ = copy.abort("abrq stopped sending").await;
            return Err(e);
        }
    }
    copy.finish().await.map(drop)
}

/// One value in COPY's text format: `\N` for NULL, text with its
/// backslashes, tabs and line breaks escaped.
fn write_cell(buf: &mut Vec<u8>, cell: &Cell<'_>) {
    match cell {
        Cell::Null => buf.extend_from_slice(b"\\N"),
        Cell::Bool(b) => buf.push(if *b { b't' } else { b'f' }),
        Cell::Int(i) => buf.extend_from_slice(i.to_string().as_bytes()),
        Cell::Float(f) => {
            let text = if f.is_nan() {
                "NaN".to_string()
            } else if f.is_infinite() {
                if *f > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
            } else {
                f.to_string()
            };
            buf.extend_from_slice(text.as_bytes());
        }
        Cell::Decimal(s) => escape(buf, s),
        Cell::Text(s) => escape(buf, s),
        Cell::Date(d) => buf.extend_from_slice(d.format("%Y-%m-%d").to_string().as_bytes()),
        Cell::Ts(t) => {
            let text = t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
            buf.extend_from_slice(text.as_bytes());
        }
        Cell::Json(v) => escape(buf, &v.to_string()),
    }
}

fn escape(buf: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let special = |b: &u8| matches!(b, b'\\' | b'\t' | b'\n' | b'\r');
    // most values have nothing to escape: copy runs between escapes whole
    let mut from = 0;
    while let Some(at) = bytes[from..].iter().position(special) {
        let at = from + at;
        buf.extend_from_slice(&bytes[from..at]);
        buf.extend_from_slice(match bytes[at] {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            _ => b"\\r",
        });
        from = at + 1;
    }
    buf.extend_from_slice(&bytes[from..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn text(cell: Cell<'_>) -> String {
        let mut buf = Vec::new();
        write_cell(&mut buf, &cell);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn values_are_written_as_copy_text_reads_them() {
        assert_eq!(text(Cell::Null), "\\N");
        assert_eq!(text(Cell::Bool(true)), "t");
        assert_eq!(text(Cell::Int(-42)), "-42");
        assert_eq!(text(Cell::Float(0.1)), "0.1");
        assert_eq!(text(Cell::Float(f64::INFINITY)), "Infinity");
        assert_eq!(
            text(Cell::Text(Cow::Borrowed("a\tb\nc\\d\re"))),
            "a\\tb\\nc\\\\d\\re"
        );
        assert_eq!(text(Cell::Text(Cow::Borrowed("\\N"))), "\\\\N");
        let v = serde_json::json!({"k": "line\nbreak"});
        assert_eq!(text(Cell::Json(&v)), "{\"k\":\"line\\\\nbreak\"}");
    }
}
