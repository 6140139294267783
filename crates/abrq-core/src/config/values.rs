//! Scalar config values: interpolated strings, secrets, durations, sizes.
//! Each one fails inside deserialization, so the TOML error names the key
//! and its line.

use std::fmt;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Replaces `${VAR}` with the environment variable and `${file:PATH}` with
/// the file's contents (one trailing newline dropped, as secret files have).
pub fn interpolate(raw: &str) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            // The value is not quoted back: it may be a secret.
            .ok_or_else(|| "unclosed `${`".to_string())?;
        let name = &after[..end];
        if let Some(path) = name.strip_prefix("file:") {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read secret file {path}: {e}"))?;
            out.push_str(text.strip_suffix('\n').unwrap_or(&text));
        } else {
            if name.is_empty() {
                return Err("empty `${}`".into());
            }
            let v = std::env::var(name)
                .map_err(|_| format!("environment variable {name} is not set"))?;
            out.push_str(&v);
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A plain string value after interpolation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        interpolate(&raw).map(Text).map_err(D::Error::custom)
    }
}

impl Text {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A credential: interpolated like [`Text`], never shown in `Debug`,
/// `Display` or serialized output.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The real value, for the one place that hands it to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_string(SecretVisitor)
    }
}

/// Takes only a string, and says so without serde's usual "invalid type:
/// integer `5`", which would print a mistyped secret.
struct SecretVisitor;

impl<'de> serde::de::Visitor<'de> for SecretVisitor {
    type Value = Secret;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
        interpolate(v).map(Secret).map_err(E::custom)
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
        Err(not_a_string("a boolean"))
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Secret, E> {
        Err(not_a_string("a number"))
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Secret, E> {
        Err(not_a_string("a number"))
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
        Err(not_a_string("a number"))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(not_a_string("an array"))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(not_a_string("a table or date"))
    }
}

fn not_a_string<E: serde::de::Error>(got: &str) -> E {
    E::custom(format!(
        "a secret must be a string, not {got} (value not shown)"
    ))
}

/// A duration written as `"500ms"`, `"30s"`, `"5m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        let value = interpolate(&raw).map_err(D::Error::custom)?;
        humantime::parse_duration(&value)
            .map(Dur)
            .map_err(|e| D::Error::custom(unparsable("duration", &raw, &value, e)))
    }
}

/// Names the value as written; what `${..}` brought in is not shown, as it
/// may come from a secret file or variable.
fn unparsable(what: &str, raw: &str, value: &str, e: impl fmt::Display) -> String {
    if raw == value {
        format!("invalid {what} {raw:?}: {e}")
    } else {
        format!("invalid {what} {raw:?} (the interpolated value is not shown)")
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(self.0).to_string())
    }
}

/// A byte size written as `"4MiB"`, `"10 GiB"` or a bare integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Size(n)),
            Raw::Str(raw) => {
                let value = interpolate(&raw).map_err(D::Error::custom)?;
                value
                    .parse::<bytesize::ByteSize>()
                    .map(|b| Size(b.as_u64()))
                    .map_err(|e| D::Error::custom(unparsable("size", &raw, &value, e)))
            }
        }
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_env_and_files() {
        std::env::set_var("ABRQ_TEST_INTERP", "v1");
        let dir = std::env::temp_dir().join(format!("abrq-interp-{}", std::process::id()));
        std::fs::write(&dir, "s3cret\n").unwrap();
        let raw = format!("a-${{ABRQ_TEST_INTERP}}-${{file:{}}}-z", dir.display());
        assert_eq!(interpolate(&raw).unwrap(), "a-v1-s3cret-z");
        std::fs::remove_file(dir).unwrap();
        assert!(interpolate("${ABRQ_TEST_SURELY_UNSET_VAR}")
            .unwrap_err()
            .contains("ABRQ_TEST_SURELY_UNSET_VAR"));
        assert!(interpolate("${oops").is_err());
    }

    #[test]
    fn secret_never_shows() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"***\"");
        assert_eq!(s.expose(), "hunter2");
    }
}
