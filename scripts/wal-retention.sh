#!/usr/bin/env bash
# How much WAL a PostgreSQL cdc stream's slot holds back while its tables
# are quiet and another database on the same cluster writes about 1 GiB,
# beside a slot nobody reads. abrq confirms the positions the server's
# keepalives report once all it read is staged, so its slot should hold
# next to nothing.
#
#   ABRQ=target/release/abrq scripts/wal-retention.sh
#   HEARTBEAT=5s ABRQ=target/release/abrq scripts/wal-retention.sh   # with heartbeat_interval
#
# The cluster is $ABRQ_TEST_PGCDC_URL (wal_level = logical; `eval
# "$(scripts/services.sh env)"` sets it), postgres://postgres@127.0.0.1:5442
# otherwise. It creates and drops the database walnoise, the schema
# walquiet, and the slots abrq_walprobe and walprobe_unread.
set -euo pipefail
url=${ABRQ_TEST_PGCDC_URL:-postgres://postgres@127.0.0.1:5442/test}
base=${url%/*}
host=$(sed -E 's#^postgres(ql)?://([^@/]*@)?([^:/]+).*#\3#' <<<"$base")
port=$(sed -nE 's#^.*:([0-9]+)$#\1#p' <<<"$base")
abrq=${ABRQ:-abrq}
settle=${SETTLE:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
q() { psql "$base/$1" -v ON_ERROR_STOP=1 -qAtc "$2"; }

q postgres "DROP DATABASE IF EXISTS walnoise"
q postgres "CREATE DATABASE walnoise"
q walnoise "CREATE TABLE noise (id bigint, pad text)"
q test "DROP SCHEMA IF EXISTS walquiet CASCADE"
q test "CREATE SCHEMA walquiet; CREATE TABLE walquiet.t (id int PRIMARY KEY, v int); INSERT INTO walquiet.t VALUES (1, 1)"
for s in abrq_walprobe walprobe_unread; do
  q test "SELECT pg_drop_replication_slot('$s') FROM pg_replication_slots WHERE slot_name = '$s'" >/dev/null
done
q test "DROP PUBLICATION IF EXISTS abrq_walprobe"
q test "SELECT 1 FROM pg_create_logical_replication_slot('walprobe_unread', 'pgoutput')" >/dev/null

heartbeat=""
if [ -n "${HEARTBEAT:-}" ]; then heartbeat="heartbeat_interval = \"$HEARTBEAT\""; fi
cat >"$work/abrq.toml" <<TOML
data_dir = "$work/data"
[server]
listen = "127.0.0.1:0"
[[streams]]
name = "quiet"
[streams.source]
engine = "postgres"
mode = "cdc"
host = "$host"
port = ${port:-5432}
username = "postgres"
database = "test"
tables = ["walquiet.t"]
slot = "abrq_walprobe"
publication = "abrq_walprobe"
$heartbeat
[[streams.destinations]]
name = "out"
engine = "local"
database = "$work/out"
format = "jsonl"
TOML
"$abrq" run -c "$work/abrq.toml" >"$work/log" 2>&1 &
pid=$!
sleep 5
start=$(q test "SELECT pg_current_wal_lsn()")
t0=$(date +%s)
for _ in 1 2 3 4 5; do
  q walnoise "INSERT INTO noise SELECT g, repeat('x', 1000) FROM generate_series(1, 200000) g"
done
written=$(q test "SELECT pg_current_wal_lsn() - '$start'::pg_lsn")
secs=$(($(date +%s) - t0))
sleep "$settle"
echo "WAL written elsewhere: $written bytes in $secs s; $settle s later, per slot:"
echo "slot | held back (current - restart_lsn) | unconfirmed (current - confirmed_flush_lsn)"
q test "SELECT slot_name, pg_current_wal_lsn() - restart_lsn, pg_current_wal_lsn() - confirmed_flush_lsn
        FROM pg_replication_slots WHERE slot_name IN ('abrq_walprobe', 'walprobe_unread') ORDER BY 1"
kill "$pid"
wait "$pid" 2>/dev/null || true
q test "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name IN ('abrq_walprobe', 'walprobe_unread')" >/dev/null
q test "DROP PUBLICATION IF EXISTS abrq_walprobe"
q test "DROP SCHEMA walquiet CASCADE"
q postgres "DROP DATABASE walnoise"
