//! JSON of any depth. A database accepts values nested far deeper than
//! serde_json's default recursion limit (128): PostgreSQL takes a jsonb
//! value 10,000 levels deep. Record data from a database and the spool's
//! lines are parsed here, with the limit off and the stack grown on the
//! heap as the parse goes deeper, so any value the source accepted is
//! staged and delivered unchanged. (Input from HTTP ingest and files keeps
//! the limit: it is refused at the door, naming the line.)
//!
//! Serializing and dropping such a value recurses too: the binary's
//! threads have stacks large enough for it (`main.rs`).

use serde::de::DeserializeOwned;

/// Parses `bytes` as one JSON value of any depth.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.disable_recursion_limit();
    let value = T::deserialize(serde_stacker::Deserializer::new(&mut de))?;
    de.end()?;
    Ok(value)
}

/// Parses `bytes` as one JSON value of any depth through `seed`.
pub fn from_slice_seed<'de, S: serde::de::DeserializeSeed<'de>>(
    bytes: &'de [u8],
    seed: S,
) -> serde_json::Result<S::Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.disable_recursion_limit();
    let value = seed.deserialize(serde_stacker::Deserializer::new(&mut de))?;
    de.end()?;
    Ok(value)
}

/// Parses `text` as one JSON value of any depth.
pub fn from_str<T: DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    from_slice(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn a_value_deeper_than_the_default_limit_parses() {
        // on a thread with a stack as large as the binary's: dropping and
        // comparing such a value recurses
        std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(|| {
                let depth = 20_000;
                let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
                assert!(serde_json::from_str::<Value>(&text).is_err());
                let v: Value = from_str(&text).unwrap();
                assert_eq!(serde_json::to_string(&v).unwrap(), text);
                assert!(from_str::<Value>("[1] x").is_err());
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
