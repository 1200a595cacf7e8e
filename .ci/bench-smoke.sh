#!/usr/bin/env bash
# CI: the benchmark report tool (bench/cmd/benchreport) must keep working.
# Runs its tests, its smoke mode (every benchmark for a few milliseconds,
# through the whole pipeline into a temp dir, the report and charts checked),
# and checks that the committed BENCHMARKS.md and charts are well-formed and
# exactly what the committed bench/results/*.json render to; then the
# service benchmark's quick mode (bench/service.sh --quick). Writes nothing
# outside a temp dir; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

committed() { sha256sum BENCHMARKS.md bench/results/* 2>/dev/null || true; }
committed >"$tmp/before"

cd bench
go vet ./cmd/benchreport ./cmd/loadgen
go test -count=1 ./cmd/benchreport ./cmd/loadgen
go run ./cmd/benchreport -short -out "$tmp/smoke"
go run ./cmd/benchreport -verify
cd ..

# The service benchmark (bench/service.sh) in its quick mode: serve, the
# load generator's suite (bench/cmd/loadgen) and the bare handler, end to
# end, in well under 20 s.
bash bench/service.sh --quick >"$tmp/service.out" || { cat "$tmp/service.out" >&2; exit 1; }
for want in 'binary batches of 1,048,576' 'JSON batches of 10,000' 'single IDs (JSON)' 'bare net/http handler, same body' \
	'single IDs at 5000 requests/s' 'binary, verified: 8 batches decoded' 'single IDs: service/bare requests/s = ' 'ratio service/bare requests/s: '; do
	grep -qF "$want" "$tmp/service.out" || { echo "bench-smoke: bench/service.sh --quick printed no \"$want\":" >&2; cat "$tmp/service.out" >&2; exit 1; }
done

committed >"$tmp/after"
if ! cmp -s "$tmp/before" "$tmp/after"; then
	echo "bench-smoke: committed report files changed:" >&2
	diff "$tmp/before" "$tmp/after" >&2 || true
	exit 1
fi
echo "bench-smoke: ok"
