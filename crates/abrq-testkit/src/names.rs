//! Unique names for test resources, so tests can run in parallel and be
//! rerun against services that keep what earlier runs left.
//!
//! Every name is `abrq`, the caller's prefix and a random suffix, in
//! lowercase ASCII letters and digits joined by one separator: valid for S3
//! and GCS buckets, Azure containers (no doubled dashes), Kafka topics, FTP
//! directories and SQL databases alike.

use rand::Rng;

const SUFFIX_LEN: usize = 10;
const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// An S3 or GCS bucket name (at most 63 characters).
pub fn bucket(prefix: &str) -> String {
    build(prefix, '-', 63)
}

/// An Azure Blob container name (at most 63 characters).
pub fn container(prefix: &str) -> String {
    build(prefix, '-', 63)
}

/// A directory name for FTP and FTPS tests.
pub fn dir(prefix: &str) -> String {
    build(prefix, '-', 100)
}

/// A Kafka topic name.
pub fn topic(prefix: &str) -> String {
    build(prefix, '-', 200)
}

/// A database (or schema) name: underscores, so it needs no quoting, and at
/// most 63 characters, PostgreSQL's limit.
pub fn database(prefix: &str) -> String {
    build(prefix, '_', 63)
}

fn build(prefix: &str, sep: char, max_len: usize) -> String {
    let mut head = String::from("abrq");
    for part in prefix
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|p| !p.is_empty())
    {
        head.push(sep);
        head.push_str(&part.to_ascii_lowercase());
    }
    // the suffix must survive truncation: it is what makes the name unique
    head.truncate(max_len - SUFFIX_LEN - 1);
    let head = head.trim_end_matches(sep);
    format!("{head}{sep}{}", suffix())
}

fn suffix() -> String {
    let mut rng = rand::rng();
    (0..SUFFIX_LEN)
        .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn well_formed(name: &str, sep: char, max_len: usize) {
        assert!(name.len() <= max_len, "{name} is too long");
        assert!(name.starts_with("abrq"), "{name}");
        assert!(!name.contains(&format!("{sep}{sep}")), "{name}");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == sep),
            "{name}"
        );
    }

    #[test]
    fn names_are_valid_everywhere() {
        well_formed(&bucket("S3 smoke/test"), '-', 63);
        well_formed(&container("azure--smoke"), '-', 63);
        well_formed(&topic("kafka.smoke"), '-', 200);
        well_formed(&dir("ftp smoke"), '-', 100);
        well_formed(&database("pg-smoke"), '_', 63);
    }

    #[test]
    fn long_prefixes_keep_the_suffix() {
        let name = bucket(&"x".repeat(200));
        well_formed(&name, '-', 63);
        assert_eq!(name.rsplit('-').next().map(str::len), Some(SUFFIX_LEN));
    }

    #[test]
    fn names_differ() {
        assert_ne!(bucket("same"), bucket("same"));
    }
}
