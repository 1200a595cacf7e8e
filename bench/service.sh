#!/usr/bin/env bash
# The ID service against its limit, in one run: builds randflake, starts
# `randflake serve` on a loopback port with a fresh state directory (the
# default claim of 1,024 node IDs: a ceiling of 1,024 x 131,072 =
# 134,217,728 IDs a second), and runs the bench module's load generator
# (bench/cmd/loadgen) with --suite against it:
# binary batches of 1,048,576, JSON batches of 10,000, single IDs unpaced
# and at 5,000 requests/s, the same single-ID load against a bare net/http
# handler, and a verified binary check; then the single-ID comparison again
# with the bare handler in a process of its own, and, if wrk is installed,
# wrk's requests/s against the service and that bare handler.
#
# usage: bench/service.sh [--quick] [--duration D] [--concurrency C] [--no-wrk]
#   --quick        300ms per measurement and no wrk: a smoke test (CI), well under 20 s
#   --duration D   per measurement (default 5s)
#   --concurrency  connections of the single-ID rows and of wrk (default 4)
#   --no-wrk       skip wrk even if it is installed
#
# The service and the load generator share this machine's cores: the
# figures are for this machine, and noisy if anything else runs.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=5s
concurrency=4
use_wrk=1
quick=0
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1 duration=300ms use_wrk=0 ;;
	--duration) duration=$2; shift ;;
	--concurrency) concurrency=$2; shift ;;
	--no-wrk) use_wrk=0 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "service.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done

. bench/binaries.sh

# addr_from LOG PATTERN: waits up to 30 s for a line of LOG matching
# PATTERN and prints the host:port that follows it.
addr_from() {
	local log=$1 pattern=$2 addr=""
	for _ in $(seq 300); do
		addr=$(sed -n "s|.*$pattern\\([0-9.]*:[0-9]*\\).*|\\1|p" "$log" | head -n 1)
		[ -n "$addr" ] && { echo "$addr"; return 0; }
		sleep 0.1
	done
	echo "service.sh: no address in $log:" >&2
	cat "$log" >&2
	return 1
}

RANDFLAKE_STATE_DIR=$tmp/state "$rf" serve --listen 127.0.0.1:0 2>"$tmp/serve.log" &
pids+=($!)
svc=http://$(addr_from "$tmp/serve.log" 'msg=serving addr=')

"$lg" --serve-bare 127.0.0.1:0 2>"$tmp/bare.log" &
pids+=($!)
bare=http://$(addr_from "$tmp/bare.log" 'bare handler on http://')

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
echo "randflake service benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)'), $(go version | cut -d' ' -f3-)"
echo "machine: ${cpu:-unknown CPU}, $(nproc) logical CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo "service: randflake serve on $svc, 1,024 node IDs: ceiling 1,024 x 131,072 = 134,217,728 IDs/s"
echo "command: bench/service.sh $([ $quick = 1 ] && echo --quick || echo "--duration $duration --concurrency $concurrency")"
echo
"$lg" --url "$svc" --suite --duration "$duration" --concurrency "$concurrency" | tee "$tmp/suite.out"
grep -q '^single IDs: service/bare requests/s = ' "$tmp/suite.out" || { echo "service.sh: the suite printed no ratio" >&2; exit 1; }
echo "(a run of D seconds touches D+1 wall-clock seconds, so short runs may pass the per-second ceiling)"
echo
echo "single IDs against the bare handler in a process of its own ($bare):"
"$lg" --url "$svc" --compare-bare --bare-url "$bare" --duration "$duration" --concurrency "$concurrency" | sed -n 's/^ratio/  ratio/p'

if [ "$use_wrk" = 1 ]; then
	if command -v wrk >/dev/null; then
		echo
		echo "wrk -t2 -c$concurrency -d$duration (single IDs, JSON; the bare handler in a process of its own):"
		rps() { wrk -t2 -c"$concurrency" -d"$duration" --latency "$1" | tee "$tmp/wrk.out" | sed -n 's/^Requests\/sec: *//p'; }
		s=$(rps "$svc/v1/ids")
		s99=$(sed -n 's/^ *99% *//p' "$tmp/wrk.out")
		b=$(rps "$bare/v1/ids")
		b99=$(sed -n 's/^ *99% *//p' "$tmp/wrk.out")
		echo "  service $s requests/s (p99 $s99), bare $b requests/s (p99 $b99)"
		awk -v s="$s" -v b="$b" 'BEGIN { printf "  ratio service/bare requests/s: %.3f\n", s / b }'
	else
		echo
		echo "wrk is not installed (Debian: apt-get install wrk): its comparison is skipped"
	fi
fi
