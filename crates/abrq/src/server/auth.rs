//! Bearer-token checks. Tokens are compared without early exit so timing
//! does not leak how much of a guess was right.

use axum::http::{HeaderMap, StatusCode};

use super::error::ApiError;

pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
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
}
