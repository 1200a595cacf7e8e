# Sourced by bench/service.sh and bench/service-instructions.sh, from the
# repository's root. Makes the directory $tmp, removed on exit once every
# process in the array $pids is killed (with signal $kill_signal, default
# TERM) and waited for, and builds the randflake command ($rf) and the
# load generator ($lg) into it.
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "-${kill_signal:-TERM}" "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
rf=$tmp/randflake
lg=$tmp/loadgen
go build -C cmd/randflake -o "$rf" .
go build -C bench -o "$lg" ./cmd/loadgen
