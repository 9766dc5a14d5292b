#!/usr/bin/env bash
# A PostgreSQL primary and a streaming standby on loopback, for the failover soak: the machine's
# PostgreSQL binaries, the primary on 5442 and the standby on 5443, data under $PG_FAILOVER_DIR
# (default /tmp/ledger-pg-failover), trust authentication for loopback, replication synchronous
# (synchronous_standby_names = standby, synchronous_commit = on) unless started with --async.
# The shared server on 5432 is left alone.
#
#   scripts/pg-failover.sh start [--async]   initialise and start both (a running pair of the mode asked is kept; one of the other mode is stopped and made anew)
#   scripts/pg-failover.sh failover          kill the primary (immediate shutdown) and promote the standby
#   scripts/pg-failover.sh stop              stop both and remove their data
#   scripts/pg-failover.sh url DATABASE      the multi-host URL the ledger connects with
#   scripts/pg-failover.sh status            which port is the primary, and the replication state
set -euo pipefail

DIR=${PG_FAILOVER_DIR:-/tmp/ledger-pg-failover}
PRIMARY=5442
STANDBY=5443
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)

say() { printf 'pg-failover: %s\n' "$*" >&2; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$1"; }
sql() { local port=$1; shift; psql -X -q -At -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "$*"; }

start() {
	local mode=${1:-sync}
	if ready "$PRIMARY" && ready "$STANDBY"; then
		# A running pair is kept only if its replication is the mode asked for: a soak of the
		# asynchronous mode on a synchronous pair would measure nothing.
		local running
		running=$(sql "$PRIMARY" "SELECT CASE WHEN current_setting('synchronous_standby_names') = '' THEN 'async' ELSE 'sync' END" 2>/dev/null || echo unknown)
		if [ "$running" = "$mode" ]; then
			say "already running ($mode replication)"
			return 0
		fi
		say "running with $running replication, $mode asked: making the pair anew"
		stop
	fi
	rm -rf "$DIR"
	mkdir -p "$DIR"
	if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$DIR"; fi
	say "initialising the primary on $PRIMARY ($mode replication)"
	as_pg "$BIN/initdb" -D "$DIR/primary" -U postgres --auth=trust >/dev/null
	local sync="'standby'"
	[ "$mode" = async ] && sync="''"
	cat >>"$DIR/primary/postgresql.conf" <<-EOF
		listen_addresses = '127.0.0.1'
		port = $PRIMARY
		unix_socket_directories = '$DIR'
		wal_level = replica
		max_wal_senders = 4
		wal_keep_size = 256MB
		synchronous_standby_names = $sync
		synchronous_commit = on
		max_connections = 200
		shared_buffers = 128MB
		fsync = on
	EOF
	echo "host replication postgres 127.0.0.1/32 trust" >>"$DIR/primary/pg_hba.conf"
	as_pg "$BIN/pg_ctl" -D "$DIR/primary" -l "$DIR/primary.log" -w start >/dev/null
	say "copying it to the standby on $STANDBY"
	as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$PRIMARY" -U postgres -D "$DIR/standby" -R -X stream \
		-d "application_name=standby" >/dev/null
	cat >>"$DIR/standby/postgresql.conf" <<-EOF
		port = $STANDBY
		primary_conninfo = 'host=127.0.0.1 port=$PRIMARY user=postgres application_name=standby'
		hot_standby = on
	EOF
	as_pg "$BIN/pg_ctl" -D "$DIR/standby" -l "$DIR/standby.log" -w start >/dev/null
	for _ in $(seq 1 100); do
		if [ "$(sql "$PRIMARY" "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'")" = 1 ]; then
			say "streaming: $(sql "$PRIMARY" "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'")"
			return 0
		fi
		sleep 0.2
	done
	say "the standby does not stream; logs in $DIR"
	return 1
}

# failover: what a failover manager does when the primary dies. The primary is stopped in
# immediate mode (no checkpoint, no goodbye to clients: a crash), the standby promoted, and its
# synchronous_standby_names cleared, since it has no standby of its own to wait for.
failover() {
	say "killing the primary on $PRIMARY (immediate shutdown)"
	as_pg "$BIN/pg_ctl" -D "$DIR/primary" -m immediate -w stop >/dev/null || true
	say "promoting the standby on $STANDBY"
	as_pg "$BIN/pg_ctl" -D "$DIR/standby" -w promote >/dev/null
	sql "$STANDBY" "ALTER SYSTEM SET synchronous_standby_names = ''" >/dev/null
	sql "$STANDBY" "SELECT pg_reload_conf()" >/dev/null
	say "the primary is now on $STANDBY"
}

stop() {
	for node in primary standby; do
		if [ -f "$DIR/$node/postmaster.pid" ]; then
			as_pg "$BIN/pg_ctl" -D "$DIR/$node" -m fast -w stop >/dev/null 2>&1 || true
		fi
	done
	rm -rf "$DIR"
	say "stopped"
}

case "${1:-}" in
start)
	if [ "${2:-}" = --async ]; then start async; else start sync; fi
	;;
failover) failover ;;
stop) stop ;;
url)
	db=${2:?database}
	printf 'postgres://postgres@127.0.0.1:%s,127.0.0.1:%s/%s?sslmode=disable&target_session_attrs=read-write\n' "$PRIMARY" "$STANDBY" "$db"
	;;
status)
	for port in "$PRIMARY" "$STANDBY"; do
		if ready "$port"; then
			echo "$port: $(sql "$port" "SELECT CASE WHEN pg_is_in_recovery() THEN 'standby' ELSE 'primary' END")"
		else
			echo "$port: down"
		fi
	done
	if ready "$PRIMARY"; then sql "$PRIMARY" "SELECT application_name, state, sync_state FROM pg_stat_replication"; fi
	;;
*)
	sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
