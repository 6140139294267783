//! Text in a column's own character set. The binlog writes a string
//! column's bytes as the column stores them (a `latin1` column's `é` is
//! one byte, 0xE9), while a query returns them converted to the session's
//! `utf8mb4`; each is decoded strictly, so a byte sequence that is not
//! text in its set is a named failure, never a replacement character.

use std::borrow::Cow;

use encoding_rs::Encoding;

/// `bytes` as text of the MySQL character set `charset` (`None`: the
/// session's `utf8mb4`), or why not.
pub fn decode<'a>(charset: Option<&str>, bytes: &'a [u8]) -> Result<Cow<'a, str>, String> {
    let name = charset.unwrap_or("utf8mb4");
    let malformed = || format!("bytes that are not {name} text");
    match name {
        "utf8mb4" | "utf8mb3" | "utf8" | "ascii" => std::str::from_utf8(bytes)
            .map(Cow::Borrowed)
            .map_err(|_| malformed()),
        "utf32" => utf32(bytes).map(Cow::Owned).ok_or_else(malformed),
        other => {
            let Some(encoding) = encoding_of(other) else {
                return Err(format!(
                    "character set {other}, which abrq does not decode (convert the column to \
                     utf8mb4)"
                ));
            };
            encoding
                .decode_without_bom_handling_and_without_replacement(bytes)
                .ok_or_else(malformed)
        }
    }
}

/// MySQL's character sets by the WHATWG encodings that decode them.
/// MySQL's `latin1` is Windows-1252 (its undefined bytes as C1 controls,
/// as WHATWG's decoder reads them).
fn encoding_of(charset: &str) -> Option<&'static Encoding> {
    use encoding_rs::*;
    Some(match charset {
        "latin1" => WINDOWS_1252,
        "latin2" => ISO_8859_2,
        "latin5" => WINDOWS_1254,
        "latin7" => ISO_8859_13,
        "greek" => ISO_8859_7,
        "hebrew" => ISO_8859_8,
        "cp1250" => WINDOWS_1250,
        "cp1251" => WINDOWS_1251,
        "cp1256" => WINDOWS_1256,
        "cp1257" => WINDOWS_1257,
        "cp866" => IBM866,
        "koi8r" => KOI8_R,
        "koi8u" => KOI8_U,
        "macroman" => MACINTOSH,
        "tis620" => WINDOWS_874,
        "sjis" | "cp932" => SHIFT_JIS,
        "ujis" | "eucjpms" => EUC_JP,
        "euckr" => EUC_KR,
        "gbk" | "gb2312" => GBK,
        "gb18030" => GB18030,
        "big5" => BIG5,
        "ucs2" | "utf16" => UTF_16BE,
        "utf16le" => UTF_16LE,
        _ => return None,
    })
}

fn utf32(bytes: &[u8]) -> Option<String> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    bytes
        .chunks_exact(4)
        .map(|c| char::from_u32(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_set_decodes_its_own_bytes() {
        assert_eq!(decode(Some("latin1"), b"caf\xe9").unwrap(), "café");
        assert_eq!(decode(Some("latin2"), b"\xb1").unwrap(), "ą");
        assert_eq!(decode(Some("cp1251"), b"\xef\xf0\xe8").unwrap(), "при");
        assert_eq!(decode(Some("sjis"), b"\x82\xa0").unwrap(), "あ");
        assert_eq!(decode(Some("ucs2"), b"\x00\xe9").unwrap(), "é");
        assert_eq!(decode(Some("utf32"), b"\x00\x01\xf6\x00").unwrap(), "😀");
        assert_eq!(decode(None, "ünï".as_bytes()).unwrap(), "ünï");
    }

    #[test]
    fn bytes_that_are_not_text_are_refused_by_name() {
        let e = decode(Some("utf8mb4"), b"caf\xe9").unwrap_err();
        assert!(e.contains("utf8mb4"), "{e}");
        let e = decode(Some("sjis"), b"\x82").unwrap_err();
        assert!(e.contains("sjis"), "{e}");
        let e = decode(Some("armscii8"), b"a").unwrap_err();
        assert!(e.contains("armscii8"), "{e}");
    }
}
