#!/usr/bin/env bash
# The whole test suite: every module of the repository vetted and tested,
# the library under the race detector. .ci/run runs this first.
set -euo pipefail
cd "$(dirname "$0")"

# Prerequisites, all checked before anything runs: every missing one is
# named at once, with the Debian/Ubuntu package that provides it
# (CONTRIBUTING.md has the list and the times).
missing=()
if ! gov=$(go env GOVERSION 2>/dev/null); then
	missing+=("Go 1.26 or later: the go command is missing or cannot run here (go.work needs go 1.26.0)")
elif [[ $gov =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] < 26)); then
	missing+=("Go 1.26 or later: this is $gov (go.work needs go 1.26.0)")
fi
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

echo "== library: vet and tests under -race (the lease engine and its conformance suite, leasetest, on the reference store)"
go vet ./...
go test -race -count=1 ./...

echo "== etcd lease module: vet and tests under -race against etcd servers the tests start (etcd, etcdctl), the lease conformance suite included"
(cd etcdlease && go vet ./... && go test -race -count=1 ./...)

echo "== PostgreSQL lease module: vet and tests under -race against PostgreSQL servers the tests start (initdb, postgres), the lease conformance suite included"
(cd pglease && go vet ./... && go test -race -count=1 ./...)

echo "== Kubernetes lease module: vet and tests under -race against a kube-apiserver and etcd the tests start (kube-apiserver from .ci/kube-apiserver.sh or \$RANDFLAKE_KUBE_APISERVER), the lease conformance suite included"
(cd kubelease && go vet ./... && go test -race -count=1 ./...)

echo "== command module (randflake gen/inspect/serve/...): vet and tests under -race"
(cd cmd/randflake && go vet ./... && go test -race -count=1 ./...)

echo "== fleet chaos: serve on a 3-member etcd cluster, on PostgreSQL, and 16 serve on one state directory, under SIGKILL, SIGSTOP, partitions, quorum loss, wiped claims, restored snapshots and rolled-back rows (about 3.5 minutes)"
(cd cmd/randflake && go vet -tags chaos ./internal/chaos/ && log=$(mktemp) && trap 'rm -f "$log"' EXIT &&
	if go test -tags chaos -count=1 -timeout 10m -v ./internal/chaos/ >"$log" 2>&1; then
		grep -E '^(chaos( [a-z]+)?: |--- |ok )' "$log"
	else
		cat "$log"
		exit 1
	fi)

echo "== bench module: vet, and every benchmark once"
(cd bench && go vet ./... && go test -count=1 -run . -bench . -benchtime 1x ./... >/dev/null && echo "bench: every benchmark ran once")
