#!/usr/bin/env bash
# Instructions per single-ID request in the server process, for
# `randflake serve` and for the bare net/http handler of
# the load generator's `loadgen --serve-bare` (bench/cmd/loadgen), each run under valgrind's callgrind:
# counts that hardly change with what else the machine runs, unlike
# requests per second on a shared machine. Each server gets 500 requests to
# warm up, then its counters are zeroed, it serves N requests (one
# connection, `loadgen --verify=false`) and its counters are dumped.
# The counts include the server's background goroutines during those
# requests. Both servers run with GOMAXPROCS=1, without which the
# scheduler's spinning while it waits for the next request adds an amount
# that depends on timing, and without Go's asynchronous preemption
# (GODEBUG=asyncpreemptoff=1), whose signals callgrind cannot follow.
#
# usage: bench/service-instructions.sh [N] [ROUNDS]   (defaults 5000 and 2)
# Needs valgrind (Debian: apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5000}
rounds=${2:-2}
command -v callgrind_control >/dev/null || { echo "service-instructions.sh: valgrind is not installed" >&2; exit 1; }

kill_signal=KILL # valgrind's children are stopped at once
. bench/binaries.sh

# measure NAME BIN ARGS...: prints the instructions per request of BIN ARGS.
measure() {
	local name=$1 bin=$2 log=$tmp/$1.log addr="" total
	shift 2
	rm -f "$tmp/$name.out"*
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 RANDFLAKE_STATE_DIR=$tmp/state-$name valgrind --tool=callgrind \
		--callgrind-out-file="$tmp/$name.out.%p" "$bin" "$@" 2>"$log" &
	pid=$!
	pids=("$pid")
	for _ in $(seq 600); do
		addr=$(sed -n 's#.*\(msg=serving addr=\|bare handler on http://\)\([0-9.]*:[0-9]*\).*#\2#p' "$log" | head -n 1)
		[ -n "$addr" ] && break
		sleep 0.1
	done
	[ -n "$addr" ] || { echo "service-instructions.sh: $name did not start:" >&2; cat "$log" >&2; exit 1; }
	"$lg" --url "http://$addr" --verify=false --concurrency 1 --requests 500 --duration 60s >/dev/null
	callgrind_control -z "$pid" >/dev/null 2>&1
	"$lg" --url "http://$addr" --verify=false --concurrency 1 --requests "$n" --duration 60s >/dev/null
	callgrind_control -d "$pid" >/dev/null 2>&1
	for _ in $(seq 100); do
		total=$(cat "$tmp/$name.out".* 2>/dev/null | sed -n 's/^\(summary\|totals\): *//p' | head -n 1)
		[ -n "$total" ] && break
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pids=()
	echo $((total / n))
}

echo "instructions per single-ID JSON request in the server process ($n requests, one connection; commit $(git rev-parse --short HEAD))"
for r in $(seq "$rounds"); do
	s=$(measure serve "$rf" serve --listen 127.0.0.1:0)
	b=$(measure bare "$lg" --serve-bare 127.0.0.1:0)
	awk -v s="$s" -v b="$b" -v r="$r" 'BEGIN { printf "round %d: serve %d, bare handler %d, bare/serve %.3f\n", r, s, b, b / s }'
done
