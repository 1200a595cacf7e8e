#!/usr/bin/env bash
# Runs tests again and again while two busy loops load both cores, as a
# shared 2-core CI runner is loaded, to prove a test does not depend on an
# idle machine.
#
#   .ci/stress.sh [-n N] [-run REGEXP] [-norace] [-loops K] DIR [DIR...]
#
# DIR is a package directory relative to the repository (".", "statedir",
# "cmd/randflake", "pglease"...; DIR/... for every package below it), in
# whichever module holds it. Each of the N rounds runs
# `go test -race -count=1 [-run REGEXP]` once per DIR, in the module's own
# directory, and keeps the log of every failure. The last line is the
# summary, "N passed, N failed" (one per round and DIR); the exit status is
# 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
n=3 run="" race=-race loops=2
usage() { sed -n '5,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	-n) n=$2; shift 2 ;;
	-run) run=$2; shift 2 ;;
	-norace) race=""; shift ;;
	-loops) loops=$2; shift 2 ;;
	-h | --help) usage ;;
	-*) echo "stress.sh: unknown flag $1" >&2; usage ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || usage
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "stress.sh: -n takes a positive count, not $n" >&2; exit 2; }
[[ $loops =~ ^[0-9]+$ ]] || { echo "stress.sh: -loops takes a count, not $loops" >&2; exit 2; }

# Each DIR's module directory and its package path within it.
mods=() pkgs=()
for d in "$@"; do
	d=${d#./}
	base=${d%/...}
	[ -d "$base" ] || { echo "stress.sh: no directory $base" >&2; exit 2; }
	m=$base
	while [ ! -f "$m/go.mod" ]; do
		[ "$m" != . ] || { echo "stress.sh: $base is in no module" >&2; exit 2; }
		m=$(dirname "$m")
	done
	rel=${d#"$m"}
	rel=./${rel#/}
	mods+=("$m") pkgs+=("$rel")
done

logs=$(mktemp -d "${TMPDIR:-/tmp}/stress.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM
for _ in $(seq 1 "$loops"); do
	sh -c 'while :; do :; done' &
	pids+=($!)
done
echo "stress: $loops busy loops on $(nproc) cores; $n rounds of ${*}${run:+ -run $run}; failure logs in $logs"

passed=0 failed=0
for round in $(seq 1 "$n"); do
	for i in "${!mods[@]}"; do
		m=${mods[$i]} p=${pkgs[$i]}
		log="$logs/round$round-$(echo "$m/$p" | tr '/.' '__').log"
		t0=$SECONDS
		args=(test $race -count=1)
		[ -z "$run" ] || args+=(-run "$run")
		if (cd "$m" && go "${args[@]}" "$p") >"$log" 2>&1; then
			passed=$((passed + 1))
			echo "round $round: ok   $m $p ($((SECONDS - t0)) s, load $(cut -d' ' -f1 /proc/loadavg))"
			rm -f "$log"
		else
			failed=$((failed + 1))
			echo "round $round: FAIL $m $p ($((SECONDS - t0)) s, load $(cut -d' ' -f1 /proc/loadavg)): $log"
			grep -E -- '^(\s*--- FAIL|FAIL|panic:)|_test\.go:[0-9]+:' "$log" | head -20 | sed 's/^/    /'
		fi
	done
done
echo "stress: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
