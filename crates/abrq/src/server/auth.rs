//! Bearer-token checks. Tokens are compared as SHA-256 digests in constant
//! time, so neither a guess's content nor its length shows in the timing.

use axum::http::{HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;

pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

/// Both sides are hashed first: digests have one length whatever the
/// inputs', and the comparison of the two digests does not stop early.
fn same(a: &str, b: &str) -> bool {
    Sha256::digest(a.as_bytes())
        .ct_eq(&Sha256::digest(b.as_bytes()))
        .into()
}

/// Passes when no token is required or the request carries it.
pub fn require(headers: &HeaderMap, token: Option<&str>) -> Result<(), ApiError> {
    let Some(expected) = token else {
        return Ok(());
    };
    match bearer(headers) {
        Some(got) if same(got, expected) => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid bearer token",
        )),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_tokens() {
        let mut h = HeaderMap::new();
        assert!(require(&h, None).is_ok());
        assert!(require(&h, Some("t")).is_err());
        h.insert("authorization", "Bearer t".parse().unwrap());
        assert!(require(&h, Some("t")).is_ok());
        assert!(require(&h, Some("u")).is_err());
    }

    #[test]
    fn same_needs_equal_content_and_length() {
        let token = "admin-t0ken";
        assert!(same(token, token));
        assert!(same("", ""));
        let long = "x".repeat(4096);
        for guess in ["", "a", "admin-t0ke", "admin-t0ken ", "admin-t0keN", &long] {
            assert!(!same(guess, token), "{guess:?} matched");
            assert!(!same(token, guess), "{guess:?} matched, reversed");
        }
    }
}
