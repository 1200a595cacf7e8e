#!/usr/bin/env bash
# The whole test suite: every module of the repository vetted and tested
# under the race detector, against the real servers the tests start.
# .ci/run runs this first.
#
#   ./test.sh           the whole suite (CONTRIBUTING.md: prerequisites, times)
#   ./test.sh --quick   the quick loop: every test that needs no external
#                       server and waits out no lease second (go test -short),
#                       without the race detector
#
# The steps run side by side ($RANDFLAKE_TEST_JOBS at a time; default 3,
# or 1 on a machine already loaded: they mostly wait out real seconds),
# the fleet chaos alone after them, each into a log of its own; every step
# runs to its end whatever the others do. Then every failing test is printed with its output, and the
# last line counts the tests: "N passed, N failed". The exit status is 1
# if anything failed.
set -euo pipefail
cd "$(dirname "$0")"

quick=false
for arg in "$@"; do
	case $arg in
	--quick) quick=true ;;
	-h | --help)
		sed -n '5,16p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "test.sh: unknown argument $arg (--quick, or none)" >&2
		exit 2
		;;
	esac
done
# Three steps at a time on idle cores; one at a time on a machine that
# is busy already, where steps side by side would slow each other's 3 s
# leases past their TTLs. Busy: other work using three quarters of the
# cores over the last two seconds (/proc/stat). Not the load average: it
# lags by a minute both ways, still low under work started a minute ago
# and still high after work that just ended (.ci/run's build of
# kube-apiserver, just before this on a cold runner).
busy_cores() {
	local a b
	a=$(head -n 1 /proc/stat 2>/dev/null) || { echo 0; return; }
	sleep 2
	b=$(head -n 1 /proc/stat 2>/dev/null) || { echo 0; return; }
	awk -v a="$a" -v b="$b" 'BEGIN {
		n = split(a, x); split(b, y); total = 0
		for (i = 2; i <= 9 && i <= n; i++) total += y[i] - x[i] # guest time is in user time already
		idle = (y[5] - x[5]) + (y[6] - x[6])
		if (total <= 0) { print 0; exit }
		printf "%.2f", (total - idle) / total * '"$(nproc)"'
	}'
}
jobs=${RANDFLAKE_TEST_JOBS:-}
if [ -z "$jobs" ]; then
	jobs=3
	used=$(busy_cores)
	if awk -v u="$used" -v n="$(nproc)" 'BEGIN { exit !(u >= 0.75 * n) }'; then
		jobs=1
		echo "note: $used of $(nproc) cores busy over 2 s: one step at a time (RANDFLAKE_TEST_JOBS overrides)"
	fi
fi
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: RANDFLAKE_TEST_JOBS must be a positive count, not $jobs" >&2; exit 2; }

# Prerequisites, all checked before anything runs: every missing one is
# named at once, with the Debian/Ubuntu package that provides it
# (CONTRIBUTING.md has the list and the times).
missing=()
if ! gov=$(go env GOVERSION 2>/dev/null); then
	missing+=("Go 1.26 or later: the go command is missing or cannot run here (go.work needs go 1.26.0)")
elif [[ $gov =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] < 26)); then
	missing+=("Go 1.26 or later: this is $gov (go.work needs go 1.26.0)")
fi
# The servers the whole suite starts (the quick loop needs none).
if ! $quick; then
	etcd_dir=${RANDFLAKE_ETCD_BIN:-}
	for tool in etcd etcdctl; do
		if [ -n "$etcd_dir" ]; then
			[ -x "$etcd_dir/$tool" ] || missing+=("$tool: not in \$RANDFLAKE_ETCD_BIN ($etcd_dir)")
		elif ! command -v $tool >/dev/null; then
			pkg=etcd-server
			[ $tool = etcdctl ] && pkg=etcd-client
			missing+=("$tool (etcd 3.4 or later): apt-get install $pkg, or set \$RANDFLAKE_ETCD_BIN to its directory")
		fi
	done
	# PostgreSQL as pglease/pgtest finds it: $RANDFLAKE_PGLEASE_BIN, else
	# initdb on PATH, else /usr/lib/postgresql/VERSION/bin.
	pg_dir=${RANDFLAKE_PGLEASE_BIN:-}
	if [ -z "$pg_dir" ]; then
		if p=$(command -v initdb); then
			pg_dir=$(dirname "$p")
		else
			pg_dir=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
		fi
	fi
	if [ -z "$pg_dir" ] || [ ! -x "$pg_dir/initdb" ] || [ ! -x "$pg_dir/postgres" ]; then
		missing+=("initdb and postgres (PostgreSQL): apt-get install postgresql (found on PATH or under /usr/lib/postgresql/*/bin), or set \$RANDFLAKE_PGLEASE_BIN to their directory")
	fi
	kube=${RANDFLAKE_KUBE_APISERVER:-${XDG_CACHE_HOME:-$HOME/.cache}/randflake/kube-apiserver-v1.37.2}
	if [ -d kubelease ] && [ ! -x "$kube" ]; then
		if [ "${CI:-}" = true ]; then
			missing+=("kube-apiserver (for kubelease): build it with .ci/kube-apiserver.sh (about 13 CPU-minutes, once), or set \$RANDFLAKE_KUBE_APISERVER")
		else
			echo "note: no kube-apiserver at $kube: the kubelease tests against a real API server skip;"
			echo "      .ci/kube-apiserver.sh builds it (about 13 CPU-minutes, once)"
		fi
	fi
	if ! command -v curl >/dev/null; then
		if [ "${CI:-}" = true ]; then
			missing+=("curl (the command's TLS and HTTP/2 tests): apt-get install curl")
		else
			echo "note: no curl: the command's TLS and HTTP/2 tests against curl skip (apt-get install curl)"
		fi
	fi
fi
if [ ${#missing[@]} -gt 0 ]; then
	echo "test.sh: missing prerequisites:" >&2
	printf '  - %s\n' "${missing[@]}" >&2
	echo "(Debian/Ubuntu: apt-get install etcd-server etcd-client postgresql; see CONTRIBUTING.md)" >&2
	exit 1
fi

# The reference implementation's cross-language vectors, beside the checkout.
if [ -z "${RANDFLAKE_VECTORS:-}" ] && [ -f ../shared/vectors/randflake_reference_vectors.json ]; then
	RANDFLAKE_VECTORS="$(cd .. && pwd)/shared/vectors/randflake_reference_vectors.json"
	export RANDFLAKE_VECTORS
fi
if [ -z "${RANDFLAKE_VECTORS:-}" ]; then
	echo "note: the reference implementation's vectors are not beside the checkout (../shared/vectors, or set RANDFLAKE_VECTORS):"
	echo "      compatibility is checked against the project's own known answers in testdata/golden_vectors.json only"
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/randflake-test.XXXXXX")
start=$SECONDS
race=-race short=""
if $quick; then
	race="" short=-short
fi
# go test's own limit per test binary, far above any package's time on a
# loaded machine: a hung test is reported with every goroutine's stack.
timeout=25m

# step NAME DIR GOTEST-ARGS...: go vet and go test -json in DIR, into
# $logs/NAME.vet.log and $logs/NAME.json.
step() {
	local name=$1 dir=$2
	shift 2
	local t0=$SECONDS
	if ! (cd "$dir" && go vet "${vet_tags[@]}" "${vet_pkgs[@]}") >"$logs/$name.vet.log" 2>&1; then
		echo "vet failed" >"$logs/$name.vet.failed"
	fi
	local status=ok
	(cd "$dir" && go test -json -count=1 -timeout "$timeout" "$@") >"$logs/$name.json" 2>"$logs/$name.stderr" || status=FAIL
	[ -f "$logs/$name.vet.failed" ] && status=FAIL
	printf '%-5s %-10s %4d s (at %d s)\n' "$status" "$name" $((SECONDS - t0)) $((SECONDS - start))
}

names=()
running=0
# launch NAME DIR [--vet-tags TAGS] [--vet PKGS] GOTEST-ARGS...: step in
# the background, at most $jobs at a time.
launch() {
	local name=$1 dir=$2
	shift 2
	vet_tags=() vet_pkgs=(./...)
	while [ $# -gt 0 ]; do
		case $1 in
		--vet-tags) vet_tags=(-tags "$2"); shift 2 ;;
		--vet) vet_pkgs=("$2"); shift 2 ;;
		*) break ;;
		esac
	done
	while [ "$running" -ge "$jobs" ]; do
		wait -n || true
		running=$((running - 1))
	done
	names+=("$name")
	echo "start $name: $dir"
	step "$name" "$dir" "$@" &
	running=$((running + 1))
}

echo "== $(if $quick; then echo "quick loop (go test -short, no race detector)"; else echo "whole suite (-race)"; fi), $jobs steps at a time; logs in $logs"
# What a failure may depend on: the cores, the load, and the kernel's
# ephemeral ports (the test servers' ports are picked outside them).
echo "== $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null), ephemeral ports $(tr '\t' '-' </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)"
# The longest first.
launch cmd cmd/randflake $race $short ./...
launch pglease pglease $race $short ./...
launch library . $race $short ./...
launch etcdlease etcdlease $race $short ./...
launch kubelease kubelease $race $short ./...
if ! $quick; then
	# Every benchmark once.
	launch bench bench -run . -bench . -benchtime 1x ./...
fi
if ! $quick; then
	# The fleet chaos, beside one other step at most: serve on a 3-member
	# etcd cluster, on PostgreSQL, on kube-apiserver, and 16 serve on one
	# state directory, under SIGKILL, SIGSTOP, partitions, quorum loss,
	# wiped claims, restored snapshots, rolled-back rows and replayed
	# objects, a member with a longer TTL and one under another secret
	# (docs/chaos.md). Its dozens of processes issuing millions of IDs
	# load both cores as two busy loops do, which each store's tests pass
	# under (.ci/stress.sh), but not beside two steps at once, whose tests
	# run 3 s leases. It starts once one step is left running (the
	# longest, etcdlease, usually has half a minute to go), or alone on a
	# loaded machine, where the steps run one at a time.
	while [ "$running" -gt 1 ]; do
		wait -n || true
		running=$((running - 1))
	done
	launch chaos cmd/randflake --vet-tags chaos --vet ./internal/chaos/ -tags chaos ./internal/chaos/
fi
wait
echo "== every step ended ($((SECONDS - start)) s); the results:"

args=()
for n in "${names[@]}"; do
	if [ -f "$logs/$n.vet.failed" ]; then
		args+=("vet-$n=$logs/$n.vet.log")
	fi
	if [ -s "$logs/$n.stderr" ]; then
		# What go test wrote outside its JSON stream (a bad flag, a
		# module error) is shown with the step's results.
		cat "$logs/$n.stderr" >>"$logs/$n.json"
	fi
	args+=("$n=$logs/$n.json")
done
# The chaos step's figures (IDs collected, duplicates) are printed even
# when it passes.
go build -o "$logs/testreport" ./internal/testreport
"$logs/testreport" -show '^(chaos( [a-z]+)?: )' "${args[@]}"
