#!/usr/bin/env bash
# A three-node RabbitMQ cluster on loopback, for `make soak-cluster` (the crash soak on quorum queues): nodes
# ledger-r1..3@localhost of the machine's RabbitMQ, AMQP on 5681-5683, Erlang distribution on
# 25681-25683, data and logs under $CLUSTER_DIR (default /tmp/ledger-rabbitmq-cluster), no
# plugins. The shared node on 5672 is left alone.
#
#   scripts/rabbitmq-cluster.sh start            start the nodes and join them (idempotent)
#   scripts/rabbitmq-cluster.sh stop             stop them and remove their data
#   scripts/rabbitmq-cluster.sh kill N           SIGKILL node N (1-3), as a crash would
#   scripts/rabbitmq-cluster.sh restart N        start node N again; it rejoins the cluster
#   scripts/rabbitmq-cluster.sh status           the cluster as node 1 sees it
#   scripts/rabbitmq-cluster.sh urls             LEDGER_AMQP_URL for the cluster
#   scripts/rabbitmq-cluster.sh leader QUEUE     the node that leads a quorum queue (1-3)
set -euo pipefail

DIR=${CLUSTER_DIR:-/tmp/ledger-rabbitmq-cluster}
NODES=(1 2 3)

say() { printf 'rabbitmq-cluster: %s\n' "$*" >&2; }
node() { echo "ledger-r$1@localhost"; }
port() { echo $((5680 + $1)); }
ctl() { local n=$1; shift; rabbitmqctl -q -n "$(node "$n")" "$@"; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_node() {
	local n=$1 d="$DIR/r$1"
	if port_open "$(port "$n")"; then return 0; fi
	mkdir -p "$d/mnesia" "$d/log"
	echo '[].' >"$d/enabled_plugins"
	cat >"$d/rabbitmq.conf" <<-EOF
		listeners.tcp.default = 127.0.0.1:$(port "$n")
		loopback_users = none
		cluster_partition_handling = pause_minority
	EOF
	# A quorum queue's at-least-once dead-letter worker (the delay tiers' expiry into the work
	# queues) sends again what its target did not confirm after this timeout, 180 s by default:
	# a target whose leader is killed mid-transfer holds those deliveries that long. 5 s here, so
	# the soak sees them move on; the key is named with an _ms suffix in later versions: both are set.
	cat >"$d/advanced.config" <<-EOF
		[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000},
		           {dead_letter_worker_publisher_confirm_timeout_ms, 5000}]}].
	EOF
	if id rabbitmq >/dev/null 2>&1; then chown -R rabbitmq:rabbitmq "$DIR"; fi
	say "starting $(node "$n") on port $(port "$n")"
	RABBITMQ_NODENAME="$(node "$n")" RABBITMQ_NODE_PORT="$(port "$n")" RABBITMQ_DIST_PORT=$((25680 + n)) \
		RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" RABBITMQ_PID_FILE="$d/pid" \
		RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" RABBITMQ_CONFIG_FILE="$d/rabbitmq" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" \
		rabbitmq-server -detached >/dev/null 2>&1 || true
	for _ in $(seq 1 300); do
		if ctl "$n" await_startup >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	say "$(node "$n") did not start; its log: $d/log"
	return 1
}

join_node() {
	local n=$1
	if ctl 1 cluster_status 2>/dev/null | grep -A5 -i "running nodes" | grep -q "$(node "$n")"; then return 0; fi
	say "joining $(node "$n") to $(node 1)"
	ctl "$n" stop_app
	ctl "$n" join_cluster "$(node 1)"
	ctl "$n" start_app
}

case "${1:-}" in
start)
	for n in "${NODES[@]}"; do start_node "$n"; done
	for n in 2 3; do join_node "$n"; done
	say "running: $(urls=$("$0" urls); echo "$urls")"
	;;
stop)
	for n in "${NODES[@]}"; do
		if [ -f "$DIR/r$n/pid" ]; then
			ctl "$n" stop >/dev/null 2>&1 || kill -9 "$(cat "$DIR/r$n/pid")" 2>/dev/null || true
		fi
	done
	rm -rf "$DIR"
	say "stopped"
	;;
kill)
	n=${2:?node number}
	pid=$(cat "$DIR/r$n/pid")
	say "SIGKILL $(node "$n") (pid $pid)"
	kill -9 "$pid"
	;;
restart)
	n=${2:?node number}
	start_node "$n"
	;;
status)
	ctl 1 cluster_status
	;;
urls)
	printf 'amqp://guest:guest@127.0.0.1:5681/,amqp://guest:guest@127.0.0.1:5682/,amqp://guest:guest@127.0.0.1:5683/\n'
	;;
leader)
	q=${2:?queue name}
	for n in "${NODES[@]}"; do
		if l=$(ctl "$n" list_queues name leader 2>/dev/null | awk -v q="$q" '$1 == q {print $2}') && [ -n "$l" ]; then
			echo "${l#ledger-r}" | cut -d@ -f1
			exit 0
		fi
	done
	exit 1
	;;
*)
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
