#!/usr/bin/env bash
# Makes sure PostgreSQL and RabbitMQ are up on this machine (starting them if they are down),
# that the tools the tests drive are installed (Chromium for the console's browser tests, Prometheus
# for the alerting checks), and that the given databases exist.
# Usage: scripts/services.sh [--statements] [database...]
#   --statements  make PostgreSQL preload pg_stat_statements (a restart of the server when it does
#                 not yet), so that ledger bench counts the statements per delivery; make bench
#                 passes it. Nothing else may be using the server then.
set -euo pipefail

statements=false
if [ "${1:-}" = --statements ]; then
	statements=true
	shift
fi

PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
export PGHOST PGPORT PGUSER

say() { printf 'services: %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

wait_for() { # wait_for <what> <seconds> <command...>
	local what=$1 secs=$2; shift 2
	for _ in $(seq 1 $((secs * 5))); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	say "$what did not come up within ${secs}s"
	return 1
}

install_if_missing() { # install_if_missing <command> <debian packages...>
	local cmd=$1; shift
	command -v "$cmd" >/dev/null 2>&1 && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		say "installing $* (apt-get)"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
	else
		say "$cmd is missing: install $* and run again"
		return 1
	fi
}

# PostgreSQL
if ! pg_isready -q 2>/dev/null; then
	install_if_missing pg_ctlcluster postgresql
	say "starting PostgreSQL"
	pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main start || true
	wait_for PostgreSQL 60 pg_isready -q
fi

if $statements; then
	preload=$(psql -d postgres -Atc "SHOW shared_preload_libraries")
	case ",${preload// /}," in
	*,pg_stat_statements,*) ;;
	*)
		say "preloading pg_stat_statements (restarting PostgreSQL)"
		psql -d postgres -qc "ALTER SYSTEM SET shared_preload_libraries = '${preload:+$preload,}pg_stat_statements'"
		pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -n 1)" main restart
		wait_for PostgreSQL 60 pg_isready -q
		;;
	esac
fi

# RabbitMQ
if ! port_open 127.0.0.1 5672; then
	install_if_missing rabbitmq-server rabbitmq-server
	say "starting RabbitMQ"
	rabbitmq-server -detached || true
	wait_for RabbitMQ 90 port_open 127.0.0.1 5672
	# The port opens before the broker accepts connections; wait until it answers a ping.
	wait_for RabbitMQ 60 rabbitmq-diagnostics -q ping
fi

# Chromium, for the console's browser tests (cmd/internal/app/console_test.go). Only those tests
# need it, so a machine that cannot install it still gets its databases.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 &&
	! command -v google-chrome >/dev/null 2>&1; then
	install_if_missing chromium chromium || say "without Chromium the console's browser tests fail"
fi

# Prometheus: promtool for `make alerts`, prometheus for the alerting test
# (cmd/internal/app/prometheus_test.go), which runs its own on a free loopback port. Where systemd
# runs, the package starts a system Prometheus (:9090) and node exporter (:9100): nothing here
# uses them, so stop them.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
	install_if_missing promtool prometheus || say "without Prometheus make alerts and the alerting test fail"
	if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true
	fi
fi

for db in "$@"; do
	if [ "$(psql -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]; then
		say "creating database $db"
		createdb "$db"
	fi
done

# Where autovacuum is off (this kind of CI machine sets it so), nothing vacuums the catalogs: the
# tests create and drop thousands of schemas of partitioned tables a run, and their dead catalog
# rows (7 million in pg_attribute after a day of runs here) slow every catalog lookup until
# timing-bound tests fail. Vacuum each database named, catalogs included: a second or two when
# little is dead.
if [ "$(psql -d postgres -Atc 'SHOW autovacuum')" = off ]; then
	for db in "$@"; do
		say "vacuuming $db (autovacuum is off)"
		psql -d "$db" -qc VACUUM
	done
fi
