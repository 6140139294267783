//! MariaDB's compressed binlog events (`log_bin_compress = ON`): a query
//! or rows event whose query text or rows are zlib-compressed. Each is
//! rebuilt as the uncompressed event it stands for, so the stream reads
//! it like any other.

use std::io::Read;

use flate2::read::ZlibDecoder;
use mysql_async::binlog::events::Event;
use mysql_async::binlog::{BinlogChecksumAlg, EventType};

use crate::error::{Failure, SourceError};

/// The event type each compressed type stands for.
fn plain(kind: u8) -> Option<EventType> {
    Some(match kind {
        165 => EventType::QUERY_EVENT,
        166 => EventType::WRITE_ROWS_EVENT_V1,
        167 => EventType::UPDATE_ROWS_EVENT_V1,
        168 => EventType::DELETE_ROWS_EVENT_V1,
        169 => EventType::WRITE_ROWS_EVENT,
        170 => EventType::UPDATE_ROWS_EVENT,
        171 => EventType::DELETE_ROWS_EVENT,
        _ => return None,
    })
}

/// The uncompressed event for a compressed one; None for any other.
pub fn inflate(event: &Event) -> Result<Option<Event>, SourceError> {
    let header = event.header();
    let Some(kind) = plain(header.event_type_raw()) else {
        return Ok(None);
    };
    let data = event.data();
    let start = match kind {
        EventType::QUERY_EVENT => query_text_start(event, data),
        _ => rows_start(event, kind, data),
    }
    .ok_or_else(|| malformed(header.event_type_raw(), "its header is cut short"))?;
    let rows =
        uncompress(&data[start..]).map_err(|why| malformed(header.event_type_raw(), &why))?;

    let fde = event.fde();
    let footer = fde.footer();
    let checksum = footer.get_checksum_enabled()
        && matches!(footer.get_checksum_alg(), Ok(Some(alg)) if alg != BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_OFF);
    let body = start + rows.len() + if checksum { 4 } else { 0 };
    let size = u32::try_from(19 + body)
        .map_err(|_| malformed(header.event_type_raw(), "it is over 4 GiB uncompressed"))?;
    let mut bytes = Vec::with_capacity(19 + body);
    bytes.extend_from_slice(&header.timestamp().to_le_bytes());
    bytes.push(kind as u8);
    bytes.extend_from_slice(&header.server_id().to_le_bytes());
    bytes.extend_from_slice(&size.to_le_bytes());
    bytes.extend_from_slice(&header.log_pos().to_le_bytes());
    bytes.extend_from_slice(&header.flags_raw().to_le_bytes());
    bytes.extend_from_slice(&data[..start]);
    bytes.extend_from_slice(&rows);
    if checksum {
        // read back, never checked: the server's checksum covered the compressed form
        bytes.extend_from_slice(&[0; 4]);
    }
    Event::read(fde, &bytes[..]).map(Some).map_err(|e| {
        SourceError::caused(Failure::Decode, "cannot read an inflated binlog event", e)
    })
}

/// Where a query event's text starts: after the fixed part, the status
/// variables and the NUL-ended default database.
fn query_text_start(event: &Event, data: &[u8]) -> Option<usize> {
    let post = usize::from(
        event
            .fde()
            .get_event_type_header_length(EventType::QUERY_EVENT),
    );
    if post < 13 || data.len() < post {
        return None;
    }
    let db_len = usize::from(data[8]);
    let status_len = usize::from(u16::from_le_bytes([data[11], data[12]]));
    let start = post + status_len + db_len + 1;
    (start <= data.len()).then_some(start)
}

/// Where a rows event's rows start: after the table id, flags, extra
/// data (version 2), the column count and the column bitmaps.
fn rows_start(event: &Event, kind: EventType, data: &[u8]) -> Option<usize> {
    let fde = event.fde();
    let post = usize::from(fde.get_event_type_header_length(kind));
    let mut at = post;
    let v2 = matches!(
        kind,
        EventType::WRITE_ROWS_EVENT | EventType::UPDATE_ROWS_EVENT | EventType::DELETE_ROWS_EVENT
    );
    if v2 {
        // the extra data's length (its own two bytes included) ends the post-header
        let extra = usize::from(u16::from_le_bytes([
            *data.get(post - 2)?,
            *data.get(post - 1)?,
        ]));
        at = post - 2 + extra;
    }
    let (columns, width) = lenenc(data.get(at..)?)?;
    at += width;
    let bitmap = usize::try_from(columns.div_ceil(8)).ok()?;
    let bitmaps = match kind {
        EventType::UPDATE_ROWS_EVENT | EventType::UPDATE_ROWS_EVENT_V1 => 2,
        _ => 1,
    };
    at += bitmap * bitmaps;
    (at <= data.len()).then_some(at)
}

/// A length-encoded integer and its width in bytes.
fn lenenc(buf: &[u8]) -> Option<(u64, usize)> {
    let width = match *buf.first()? {
        n @ 0..=0xfa => return Some((u64::from(n), 1)),
        0xfc => 2,
        0xfd => 3,
        0xfe => 8,
        _ => return None,
    };
    let bytes = buf.get(1..1 + width)?;
    let mut value = [0u8; 8];
    value[..width].copy_from_slice(bytes);
    Some((u64::from_le_bytes(value), 1 + width))
}

/// MariaDB's compressed form: a byte whose top bit marks it compressed,
/// whose bits 4-6 name the algorithm (0, zlib) and whose low 3 bits give
/// the width of the big-endian uncompressed length that follows, then
/// the zlib stream.
fn uncompress(buf: &[u8]) -> Result<Vec<u8>, String> {
    let Some(&head) = buf.first() else {
        return Err("it has no compressed data".into());
    };
    if head & 0x80 == 0 {
        return Err("its data is not marked compressed".into());
    }
    let algorithm = (head & 0x70) >> 4;
    if algorithm != 0 {
        return Err(format!("compression algorithm {algorithm} is not zlib"));
    }
    let width = usize::from(head & 0x07);
    if width == 0 || width > 4 || buf.len() < 1 + width {
        return Err(format!("an uncompressed length {width} bytes wide"));
    }
    let expected = buf[1..1 + width]
        .iter()
        .fold(0u64, |n, b| (n << 8) | u64::from(*b));
    let mut out = Vec::with_capacity(expected as usize);
    ZlibDecoder::new(&buf[1 + width..])
        .take(expected + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("zlib: {e}"))?;
    if out.len() as u64 != expected {
        return Err(format!(
            "it inflates to {} bytes where its header says {expected}",
            out.len()
        ));
    }
    Ok(out)
}

fn malformed(kind: u8, why: &str) -> SourceError {
    SourceError::new(
        Failure::Decode,
        format!("cannot inflate a compressed binlog event (type {kind}): {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::ZlibEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn compressed(plain: &[u8]) -> Vec<u8> {
        let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
        z.write_all(plain).unwrap();
        let body = z.finish().unwrap();
        let len = (plain.len() as u32).to_be_bytes();
        let mut out = vec![0x80 | 4];
        out.extend_from_slice(&len);
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn inflates_what_mariadb_compresses() {
        let text = b"INSERT INTO t VALUES (1, 'a long enough text')".repeat(20);
        assert_eq!(uncompress(&compressed(&text)).unwrap(), text);
    }

    #[test]
    fn refuses_a_length_that_does_not_match() {
        let mut buf = compressed(b"abcdef");
        buf[4] = 9;
        assert!(uncompress(&buf).unwrap_err().contains("header says 9"));
        assert!(uncompress(&[0x04, 0, 0, 0, 1])
            .unwrap_err()
            .contains("not marked compressed"));
        assert!(uncompress(&[0x90]).unwrap_err().contains("algorithm 1"));
    }

    #[test]
    fn reads_length_encoded_counts() {
        assert_eq!(lenenc(&[5]), Some((5, 1)));
        assert_eq!(lenenc(&[0xfc, 0x10, 0x01]), Some((0x110, 3)));
        assert_eq!(lenenc(&[0xfc, 0x10]), None);
    }
}
