#!/usr/bin/env bash
# The whole test suite: starts the test services (installing what is
# missing into a cache outside the clone), then lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

export ABRQ_CACHE_DIR="${ABRQ_CACHE_DIR:-$HOME/.cache/abrq}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ABRQ_CACHE_DIR/target}"

bash scripts/services.sh up
eval "$(bash scripts/services.sh env)"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# `services`: the tests that need the services started above run too.
cargo test --workspace --all-features --locked -- --test-threads="${ABRQ_TEST_THREADS:-4}"
