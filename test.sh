#!/usr/bin/env bash
# The whole test suite: every module of the repository vetted and tested,
# the library under the race detector. .ci/run runs this first.
set -euo pipefail
cd "$(dirname "$0")"

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
