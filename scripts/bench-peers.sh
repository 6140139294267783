#!/usr/bin/env bash
# Peer benchmark: abrq against the tools a user would pick instead, on the
# same data in the same run, printed as markdown tables. Run by hand, not in
# CI. Routes:
#   postgres  NDJSON file -> PostgreSQL: abrq (batches of 1,000 and 10,000),
#             psql \copy of the same rows as CSV (the limit), pgloader (CSV),
#             ingestr (jsonl), dlt (filesystem source, read_jsonl)
#   local     NDJSON file -> local jsonl.gz: abrq, gzip -6 (the limit), dlt's
#             filesystem destination
#   kafka     NDJSON file -> a 4-partition topic on tansu: abrq, a
#             confluent-kafka producer script (the limit)
# Rounds alternate the tools; every run's row count is checked (a wrong count
# fails the script); the tables show medians.
#
# usage: scripts/bench-peers.sh [--records N] [--rounds R] [--only postgres|local|kafka]
#   --records N   rows in the data set (default 1000000; 20000 for a quick try)
#   --rounds R    rounds per route (default 3)
#   --only ROUTE  run one route (default: all three)
#
# Installs what it needs into ${ABRQ_CACHE_DIR:-$HOME/.cache/abrq}/peers (PyPI,
# in venvs) and pgloader with apt-get when it is missing. Builds abrq with
# `cargo build --release -p abrq` into CARGO_TARGET_DIR (default: the cache's
# target-rel). PostgreSQL: $ABRQ_TEST_POSTGRES_URL, else the URL
# scripts/services.sh gives. Everything it creates is named bench_peers_* and
# removed at exit.
set -Eeuo pipefail
# say where a command failed: set -e alone exits without a word
trap 'printf "bench-peers: failed at line %s: %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE=${ABRQ_CACHE_DIR:-$HOME/.cache/abrq}
PEERS=$CACHE/peers
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target-rel}
ABRQ=$CARGO_TARGET_DIR/release/abrq
PYTHON=${PYTHON:-python3}

INGESTR_SPEC="ingestr==0.15.9"
PY_SPEC="dlt[postgres]>=1,<2 confluent-kafka"

RECORDS=1000000
ROUNDS=3
ONLY=
RECORD_BYTES=219

say() { printf 'bench-peers: %s\n' "$*" >&2; }
die() {
	say "$*"
	exit 1
}

usage() {
	sed -n '15,18p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

while (($#)); do
	case $1 in
	--records | --rounds | --only)
		(($# >= 2)) || usage
		case $1 in
		--records) RECORDS=$2 ;;
		--rounds) ROUNDS=$2 ;;
		--only) ONLY=$2 ;;
		esac
		shift 2
		;;
	*) usage ;;
	esac
done
[[ $RECORDS =~ ^[1-9][0-9]*$ ]] || die "--records wants a positive integer"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "--rounds wants a positive integer"
case $ONLY in
'') ROUTES=(postgres local kafka) ;;
postgres | local | kafka) ROUTES=("$ONLY") ;;
*) die "--only wants postgres, local or kafka" ;;
esac
want() { [[ " ${ROUTES[*]} " == *" $1 "* ]]; }

# --- scratch space and cleanup -------------------------------------------------

# everything of this run carries its pid, so runs side by side never meet
TAG=bench_peers_$$
WORK=$PEERS/work-$$
RESULTS=$WORK/results.tsv
SCHEMAS=()
TOPICS=()
STARTED_KAFKA=0

cleanup() {
	local s
	for s in "${SCHEMAS[@]}"; do
		psql "${PG_URL:-}" -qc "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1 || true
	done
	if ((${#TOPICS[@]})); then
		kafka_admin delete "${TOPICS[@]}" >/dev/null 2>&1 || true
	fi
	# stop only a broker this script started
	if ((STARTED_KAFKA)); then bash scripts/services.sh down kafka || true; fi
	rm -rf "$WORK"
}
trap cleanup EXIT

# --- install -------------------------------------------------------------------

# a venv at $1 holding spec $2 (reinstalled when the spec changes)
venv() {
	local dir=$1 spec=$2
	[[ -x $dir/bin/python && "$(cat "$dir/.bench-peers-spec" 2>/dev/null)" == "$spec" ]] && return 0
	say "installing $spec into $dir"
	rm -rf "$dir"
	"$PYTHON" -m venv "$dir" || die "cannot create a python venv; on debian: apt-get install -y python3-venv"
	# shellcheck disable=SC2086 # the spec is a list of requirements
	"$dir/bin/pip" install -q --disable-pip-version-check $spec
	printf '%s' "$spec" >"$dir/.bench-peers-spec"
}

install_tools() {
	mkdir -p "$PEERS"
	venv "$PEERS/py" "$PY_SPEC"
	PY=$PEERS/py/bin/python
	if want postgres; then
		# ingestr 0.15 ships as one binary inside its wheel
		venv "$PEERS/ingestr" "$INGESTR_SPEC"
		INGESTR=$PEERS/ingestr/bin/ingestr
		if ! command -v pgloader >/dev/null; then
			say "installing pgloader (debian package)"
			# a fresh machine's package lists may be missing or old
			apt-get install -y pgloader >/dev/null ||
				{ apt-get update >/dev/null && apt-get install -y pgloader >/dev/null; } ||
				die "apt-get install -y pgloader failed"
		fi
		command -v psql >/dev/null || die "psql is missing; on debian: apt-get install -y postgresql-client"
	fi
}

build_abrq() {
	say "building abrq (release) into $CARGO_TARGET_DIR"
	# other builds share this machine's two cores
	nice -n 19 cargo build --release -p abrq || die "cargo build --release -p abrq failed"
	[[ -x $ABRQ ]] || die "no binary at $ABRQ after the build"
}

# --- services ------------------------------------------------------------------

start_services() {
	local pg_preset=${ABRQ_TEST_POSTGRES_URL:-} need=()
	want postgres && need+=(postgres)
	if want kafka; then
		bash scripts/services.sh status kafka >/dev/null 2>&1 || STARTED_KAFKA=1
		need+=(kafka)
	fi
	((${#need[@]} == 0)) || bash scripts/services.sh up "${need[@]}"
	eval "$(bash scripts/services.sh env)"
	# a URL the caller set (with a password, say) wins over the script's default
	PG_URL=${pg_preset:-$ABRQ_TEST_POSTGRES_URL}
	KAFKA=$ABRQ_TEST_KAFKA_BROKERS
}

# PG_USER, PG_PASS, PG_HOST, PG_PORT, PG_DB from PG_URL
parse_pg_url() {
	local re='^postgres(ql)?://([^:@/]+)(:([^@]*))?@([^:/?]+)(:([0-9]+))?/([^?]+)$'
	[[ $PG_URL =~ $re ]] || die "cannot read $PG_URL as postgres://user[:password]@host[:port]/database"
	PG_USER=${BASH_REMATCH[2]}
	PG_PASS=${BASH_REMATCH[4]}
	PG_HOST=${BASH_REMATCH[5]}
	PG_PORT=${BASH_REMATCH[7]:-5432}
	PG_DB=${BASH_REMATCH[8]}
}

# The Python and Go peers run in a network namespace of their own
# (`unshare -n`), so whatever telemetry they have cannot leave the machine.
# Such a namespace has only its own loopback, not the host's 127.0.0.1, so
# there they reach PostgreSQL over its Unix socket (a file, which namespaces
# do not fence off). Where that is not possible they run on the host over TCP,
# with the telemetry opt-outs set (peer_env), and the report says so.
setup_jail() {
	JAIL=()
	PG_JAIL=()
	PEER_NET="on the host's network with the telemetry opt-outs set (unshare -n is not possible here)"
	if want postgres; then
		PG_URL_INGESTR="postgresql://$PG_USER${PG_PASS:+:$PG_PASS}@$PG_HOST:$PG_PORT/$PG_DB"
		PG_URL_DLT="postgresql://$PG_USER:$PG_PASS@$PG_HOST:$PG_PORT/$PG_DB"
	fi
	unshare -n true 2>/dev/null || return 0
	JAIL=(unshare -n --)
	PEER_NET="in a network namespace of their own (unshare -n)"
	want postgres || return 0
	local dir port
	dir=$(psql "$PG_URL" -tAc "SHOW unix_socket_directories" | cut -d, -f1 | tr -d ' ')
	port=$(psql "$PG_URL" -tAc "SHOW port")
	if [[ -z $dir || ! -S $dir/.s.PGSQL.$port ]]; then
		PEER_NET+="; to PostgreSQL, which has no Unix socket here, on the host's network over TCP with the telemetry opt-outs set"
		return 0
	fi
	PG_JAIL=(unshare -n --)
	PEER_NET+=", reaching PostgreSQL over its Unix socket (abrq, psql and pgloader over TCP on $PG_HOST)"
	PG_URL_INGESTR="postgresql://$PG_USER${PG_PASS:+:$PG_PASS}@/$PG_DB?host=$dir&port=$port"
	# dlt wants a host and a password (an empty one will do: trust ignores it)
	PG_URL_DLT="postgresql://$PG_USER:$PG_PASS@${dir//\//%2F}:$port/$PG_DB"
}

# a peer's environment: working directory $1 (dlt reads .dlt/ config from
# there), home and caches in it (ingestr makes ~/.cache/snowflake even for
# --version), dlt's documented telemetry switch off and DO_NOT_TRACK=1 (the
# common convention; ingestr documents no switch of its own)
peer_env() {
	local dir=$1
	mkdir -p "$dir/home" "$dir/cache"
	PEER_ENV=(env -C "$dir" HOME="$dir/home" XDG_CACHE_HOME="$dir/cache" DO_NOT_TRACK=1
		RUNTIME__DLTHUB_TELEMETRY=false DLT_DATA_DIR="$dir/dlt")
}

# --- helper programs -----------------------------------------------------------

write_helpers() {
	mkdir -p "$WORK"
	# rows of ~219 bytes as NDJSON and the same rows as CSV, deterministic
	cat >"$WORK/gen.py" <<'EOF'
import datetime, sys
n, size, out_json, out_csv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
         "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]
base = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
h = 88172645463325252
with open(out_json, "w") as j, open(out_csv, "w") as c:
    c.write("id,customer,amount,ts,payload\n")
    for i in range(1, n + 1):
        cust, amount = "c%d" % (i % 10007), (i * 7919) % 1000000
        ts = (base + datetime.timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        head = '{"id":%d,"customer":"%s","amount":%d,"ts":"%s","payload":"' % (i, cust, amount, ts)
        want, parts, got = size - len(head) - 2, [], 0
        while got < want:
            h ^= (h << 13) & 0xFFFFFFFFFFFFFFFF
            h ^= h >> 7
            h ^= (h << 17) & 0xFFFFFFFFFFFFFFFF
            parts.append(words[h % 16])
            got += len(parts[-1]) + 1
        payload = (" ".join(parts) + "x" * want)[:want]
        if payload.endswith(" "):
            payload = payload[:-1] + "x"
        j.write(head + payload + '"}\n')
        c.write("%d,%s,%d,%s,%s\n" % (i, cust, amount, ts, payload))
EOF
	# what a user writes with dlt: its filesystem source and jsonl reader
	cat >"$WORK/dlt_load.py" <<'EOF'
import os, sys
import dlt
from dlt.sources.filesystem import filesystem, read_jsonl

src, target, dataset, workdir = sys.argv[1:5]
files = filesystem(bucket_url="file://" + os.path.dirname(src), file_glob=os.path.basename(src))
rows = (files | read_jsonl()).with_name("events")
if target.startswith("postgresql://"):
    dest, fmt = dlt.destinations.postgres(credentials=target), None
else:
    dest, fmt = dlt.destinations.filesystem(bucket_url="file://" + target), "jsonl"
p = dlt.pipeline(pipeline_name=dataset, destination=dest, dataset_name=dataset,
                 pipelines_dir=os.path.join(workdir, "pipelines"))
p.run(rows, loader_file_format=fmt).raise_on_failed_jobs()
EOF
	# one produce per line, as the librdkafka docs show it
	cat >"$WORK/produce.py" <<'EOF'
import sys
from confluent_kafka import Producer
brokers, topic, path = sys.argv[1:4]
p = Producer({"bootstrap.servers": brokers, "linger.ms": 5, "acks": "all", "enable.idempotence": True})
failed = []
def report(err, msg):
    if err is not None:
        failed.append(err)
with open(path, "rb") as f:
    for line in f:
        while True:
            try:
                p.produce(topic, line.rstrip(b"\n"), on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
left = p.flush(120)
sys.exit(f"{left} undelivered, errors: {failed[:3]}" if left or failed else 0)
EOF
	cat >"$WORK/kafka_admin.py" <<'EOF'
import json, sys
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
cmd, brokers, topics = sys.argv[1], sys.argv[2], sys.argv[3:]
admin = AdminClient({"bootstrap.servers": brokers})
if cmd == "create":
    for f in admin.create_topics([NewTopic(t, num_partitions=4, replication_factor=1) for t in topics]).values():
        f.result()
elif cmd == "delete":
    for f in admin.delete_topics(topics).values():
        f.result()
elif cmd == "count":
    # tansu 0.6 answers a partition's end offset with its last record batch's
    # base offset + 1, short of the end, so the end offsets cannot count the
    # topic: read it whole, counting messages and distinct ids
    t = topics[0]
    parts = admin.list_topics(t, timeout=10).topics[t].partitions
    c = Consumer({"bootstrap.servers": brokers, "group.id": "bench_peers_count", "enable.auto.commit": False})
    c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for p in parts])
    n, ids, idle = 0, set(), 0
    while idle < (3 if n else 15):
        msgs = c.consume(10000, 1.0)
        idle = 0 if msgs else idle + 1
        for m in msgs:
            if m.error():
                sys.exit(f"reading {t}: {m.error()}")
            n += 1
            ids.add(json.loads(m.value())["id"])
    c.close()
    print(n if n == len(ids) else f"{n} messages with {len(ids)} distinct ids")
EOF
}

# the admin script takes the brokers first
kafka_admin() { "$PY" "$WORK/kafka_admin.py" "$1" "$KAFKA" "${@:2}"; }

generate_data() {
	NDJSON=$WORK/records.ndjson
	CSV=$WORK/records.csv
	say "generating $RECORDS records of $RECORD_BYTES bytes (NDJSON and CSV)"
	"$PY" "$WORK/gen.py" "$RECORDS" "$RECORD_BYTES" "$NDJSON" "$CSV"
	local n
	n=$(wc -l <"$NDJSON")
	((n == RECORDS)) || die "generated $n lines, wanted $RECORDS"
}

# --- running and checking one tool -----------------------------------------------

# runs "$@" with its output in $LOG; ELAPSED is its wall time in seconds
timed() {
	local t0 t1 rc=0
	t0=$(date +%s%N)
	"$@" >"$LOG" 2>&1 || rc=$?
	t1=$(date +%s%N)
	if ((rc != 0)); then
		say "failed (exit $rc): $*"
		tail -n 30 "$LOG" >&2
		exit 1
	fi
	ELAPSED=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
}

# a wrong count fails the whole run, loudly
verify() {
	local what=$1 got=$2
	[[ $got =~ ^[0-9]+$ ]] || die "COUNT FAILED: $what: no count (got '$got')"
	((got == RECORDS)) || die "COUNT FAILED: $what has $got rows, wanted $RECORDS"
}

record() {
	printf '%s\t%s\t%s\n' "$ROUTE" "$KEY" "$ELAPSED" >>"$RESULTS"
	say "$ROUTE round $ROUND: $KEY ${ELAPSED}s"
}

# a fresh run directory, the schema name and LOG for tool $KEY in this round
fresh_run() {
	RUN=$WORK/run/$ROUTE-$ROUND-${KEY//[^a-z0-9]/_}
	rm -rf "$RUN"
	mkdir -p "$RUN"
	LOG=$RUN/log
	NAME=${TAG}_${ROUND}_${KEY//[^a-z0-9]/_}
}

new_schema() {
	SCHEMAS+=("$NAME")
	psql "$PG_URL" -v ON_ERROR_STOP=1 -qc "CREATE SCHEMA $NAME" >/dev/null
}

drop_schema() {
	psql "$PG_URL" -qc "DROP SCHEMA IF EXISTS $NAME CASCADE" >/dev/null 2>&1 ||
		say "could not drop schema $NAME now; it is tried again at exit"
}

pg_count() { psql "$PG_URL" -tAc "SELECT count(*) FROM $NAME.events"; }

create_events_table() {
	psql "$PG_URL" -v ON_ERROR_STOP=1 -qc \
		"CREATE TABLE $NAME.events (id bigint, customer text, amount bigint, ts timestamptz, payload text)" >/dev/null
}

# abrq's config: the NDJSON file as source, one destination given as TOML in $1
abrq_config() {
	cat >"$RUN/abrq.toml" <<EOF
data_dir = "$RUN/data"
[server]
listen = "127.0.0.1:0"
[[streams]]
name = "bench"
[streams.source]
engine = "file"
path = "$NDJSON"
[streams.batch]
max_records = $BATCH
$1
EOF
}

run_abrq() { timed "$ABRQ" run --config "$RUN/abrq.toml" --until-drained --no-progress; }

# --- file to PostgreSQL ------------------------------------------------------------

pg_abrq() {
	new_schema
	local password=
	[[ -n $PG_PASS ]] && password="password = \"\${BENCH_PEERS_PG_PASSWORD}\""
	abrq_config "[[streams.destinations]]
name = \"db\"
engine = \"postgres\"
host = \"$PG_HOST\"
port = $PG_PORT
database = \"$PG_DB\"
username = \"$PG_USER\"
$password
schema = \"$NAME\"
table = \"events\""
	BENCH_PEERS_PG_PASSWORD=$PG_PASS run_abrq
}

# the server's own bulk path, one statement, one transaction
pg_psql() {
	new_schema
	create_events_table
	timed psql "$PG_URL" -v ON_ERROR_STOP=1 -qc "\\copy $NAME.events FROM '$CSV' CSV HEADER"
}

pg_pgloader() {
	new_schema
	create_events_table
	cat >"$RUN/load.pgloader" <<EOF
LOAD CSV
  FROM '$CSV' (id, customer, amount, ts, payload)
  INTO ${PG_URL/#postgres:/postgresql:}
  TARGET TABLE $NAME.events
  WITH skip header = 1,
       fields optionally enclosed by '"',
       fields terminated by ','
;
EOF
	timed pgloader --root-dir "$RUN/pgloader" "$RUN/load.pgloader"
}

pg_ingestr() {
	new_schema
	peer_env "$RUN"
	timed "${PG_JAIL[@]}" "${PEER_ENV[@]}" "$INGESTR" ingest --yes --progress log \
		--source-uri "jsonl://$NDJSON" --source-table events \
		--dest-uri "$PG_URL_INGESTR" --dest-table "$NAME.events" \
		--pipelines-dir "$RUN/pipelines"
}

# dlt makes its dataset (the schema) itself
pg_dlt() {
	SCHEMAS+=("$NAME")
	peer_env "$RUN"
	timed "${PG_JAIL[@]}" "${PEER_ENV[@]}" "$PY" "$WORK/dlt_load.py" \
		"$NDJSON" "$PG_URL_DLT" "$NAME" "$RUN"
}

route_postgres() {
	case $KEY in
	abrq-1000 | abrq-10000)
		BATCH=${KEY#abrq-}
		pg_abrq
		;;
	psql) pg_psql ;;
	pgloader) pg_pgloader ;;
	ingestr) pg_ingestr ;;
	dlt) pg_dlt ;;
	esac
	verify "$KEY: $NAME.events" "$(pg_count)"
	drop_schema
}

# --- file to local jsonl.gz -------------------------------------------------------

# lines in every jsonl.gz under $1 (not a leftover dot-named temporary)
gz_lines() { find "$1" -type f -name '*.jsonl.gz' ! -name '.*' -exec zcat {} + | wc -l; }

route_local() {
	case $KEY in
	abrq-1000)
		BATCH=1000
		abrq_config "[[streams.destinations]]
name = \"lake\"
engine = \"local\"
database = \"$RUN/out\"
prefix = \"events\"
format = \"jsonl.gz\"
date_partitioning = false
manifest = false"
		run_abrq
		;;
	gzip)
		# one core, level 6 as abrq's; one fsync at the end (abrq's output is durable)
		mkdir -p "$RUN/out"
		# shellcheck disable=SC2016 # expanded by that sh
		timed sh -c 'gzip -6 -c "$1" >"$2" && sync "$2"' gzip "$NDJSON" "$RUN/out/events.jsonl.gz"
		;;
	dlt)
		peer_env "$RUN"
		mkdir -p "$RUN/out"
		timed "${JAIL[@]}" "${PEER_ENV[@]}" "$PY" "$WORK/dlt_load.py" \
			"$NDJSON" "$RUN/out" "$NAME" "$RUN"
		;;
	esac
	if [[ $KEY == dlt ]]; then
		# dlt also writes its own state files as jsonl: count the table's files only
		verify "$KEY: $RUN/out" "$(gz_lines "$RUN/out/$NAME/events")"
	else
		verify "$KEY: $RUN/out" "$(gz_lines "$RUN/out")"
	fi
	rm -rf "$RUN/out" "$RUN/data"
}

# --- file to Kafka ------------------------------------------------------------------

route_kafka() {
	local topic=$NAME
	TOPICS+=("$topic")
	kafka_admin create "$topic"
	case $KEY in
	abrq-1000)
		BATCH=1000
		# acks=all and idempotence are how abrq always produces
		abrq_config "[[streams.destinations]]
name = \"events\"
engine = \"kafka\"
host = \"$KAFKA\"
database = \"$topic\""
		run_abrq
		;;
	producer) timed "$PY" "$WORK/produce.py" "$KAFKA" "$topic" "$NDJSON" ;;
	esac
	verify "$KEY: topic $topic" "$(kafka_admin count "$topic")"
	kafka_admin delete "$topic" || say "could not delete topic $topic (the broker keeps it)"
	rm -rf "$RUN/data"
}

# --- rounds and tables ----------------------------------------------------------------

tools_of() {
	case $1 in
	postgres) echo "abrq-1000 psql abrq-10000 pgloader ingestr dlt" ;;
	local) echo "abrq-1000 gzip dlt" ;;
	kafka) echo "abrq-1000 producer" ;;
	esac
}

run_route() {
	ROUTE=$1
	local tools
	read -r -a tools <<<"$(tools_of "$ROUTE")"
	for ((ROUND = 0; ROUND < ROUNDS; ROUND++)); do
		local order=("${tools[@]}") i
		# odd rounds run the tools in reverse, so none always follows the same one
		if ((ROUND % 2)); then
			order=()
			for ((i = ${#tools[@]} - 1; i >= 0; i--)); do order+=("${tools[i]}"); done
		fi
		for KEY in "${order[@]}"; do
			fresh_run
			"route_$ROUTE"
			record
			rm -rf "$RUN"
		done
	done
}

# versions for the table labels, handed to the report in its environment
versions() {
	export V_ABRQ V_PSQL='' V_PGLOADER='' V_INGESTR='' V_SERVER='' V_GZIP V_DLT V_CK V_RDK
	V_ABRQ=$("$ABRQ" --version | awk '{print $NF}')
	read -r V_DLT V_CK V_RDK < <("$PY" -c 'from importlib.metadata import version as v
import confluent_kafka as k
print(v("dlt"), v("confluent-kafka"), k.libversion()[0])')
	if want postgres; then
		V_PSQL=$(psql --version | awk '{print $3}')
		# awk reads it all: pgloader crashes on a closed pipe
		V_PGLOADER=$(pgloader --version | awk -F'"' 'NR == 1 {print $2}')
		# in its own home: it makes a cache directory there even for this
		peer_env "$WORK/version"
		V_INGESTR=$("${PEER_ENV[@]}" "$INGESTR" --version | awk '{print $NF}')
		V_SERVER=$(psql "$PG_URL" -tAc "SHOW server_version" | awk '{print $1}')
	fi
	V_GZIP=$(gzip --version | awk 'NR == 1 {print $NF}')
}

report() {
	"$PY" - "$RESULTS" "$RECORDS" "$ROUNDS" "$RECORD_BYTES" <<'EOF'
import os, statistics, sys
from collections import defaultdict
path, n, rounds, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
v = os.environ
runs = defaultdict(list)
for line in open(path):
    route, key, secs = line.rstrip("\n").split("\t")
    runs[(route, key)].append(float(secs))
labels = {
    ("postgres", "abrq-1000"): f"abrq {v['V_ABRQ']}, batches of 1,000",
    ("postgres", "abrq-10000"): f"abrq {v['V_ABRQ']}, batches of 10,000",
    ("postgres", "psql"): f"psql {v['V_PSQL']} \\copy of the CSV, one transaction (the limit)",
    ("postgres", "pgloader"): f"pgloader {v['V_PGLOADER']}, the CSV",
    ("postgres", "ingestr"): f"ingestr {v['V_INGESTR']}, jsonl:// source",
    ("postgres", "dlt"): f"dlt {v['V_DLT']}, filesystem source + read_jsonl, defaults",
    ("local", "abrq-1000"): f"abrq {v['V_ABRQ']}, batches of 1,000, jsonl.gz",
    ("local", "gzip"): f"gzip {v['V_GZIP']} -6, one core, one fsync (the limit)",
    ("local", "dlt"): f"dlt {v['V_DLT']}, filesystem destination, jsonl (gzipped)",
    ("kafka", "abrq-1000"): f"abrq {v['V_ABRQ']}, batches of 1,000",
    ("kafka", "producer"): f"confluent-kafka {v['V_CK']} (librdkafka {v['V_RDK']}), one produce per line (the limit)",
}
titles = {
    "postgres": f"file to PostgreSQL {v['V_SERVER']}",
    "local": "file to local jsonl.gz",
    "kafka": "file to Kafka (tansu, 4 partitions, acks=all, idempotent producer)",
}
for route, title in titles.items():
    present = [k for (r, k) in labels if r == route and (r, k) in runs]
    if not present:
        continue
    med = {k: statistics.median(runs[(route, k)]) for k in present}
    ours = [k for k in present if k.startswith("abrq")]
    head = "abrq is" if len(ours) == 1 else "abrq is (batches of " + " / ".join(
        format(int(k.split("-")[1]), ",") for k in ours) + ")"
    plural = "s" if rounds > 1 else ""
    print(f"\n### {title}: {n:,} records of {size} bytes, median of {rounds} round{plural}\n")
    print(f"| tool | wall s | rows/s | {head} |")
    print("|---|---|---|---|")
    for k in present:
        ratio = "" if k in ours else " / ".join(f"{med[k] / med[o]:.2f}x of it" for o in ours)
        print(f"| {labels[(route, k)]} | {med[k]:.2f} | {n / med[k]:,.0f} | {ratio} |")
EOF
	if want postgres || want local; then
		printf '\nThe Python and Go peers ran %s. Wall times include starting each process.\n' "$PEER_NET"
	fi
}

main() {
	mkdir -p "$WORK"
	: >"$RESULTS"
	install_tools
	build_abrq
	start_services
	if want postgres; then
		parse_pg_url
		psql "$PG_URL" -tAc "SELECT 1" >/dev/null || die "PostgreSQL does not answer at $PG_URL"
	fi
	setup_jail
	write_helpers
	generate_data
	versions
	local route
	for route in "${ROUTES[@]}"; do
		run_route "$route"
	done
	report
}

main
