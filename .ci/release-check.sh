#!/usr/bin/env bash
# Release check: the modules at the candidate version install and build as a
# user will get them, before anything is tagged.
#
#   .ci/release-check.sh [VERSION]
#
# VERSION defaults to the version cmd/randflake/go.mod requires the root
# module at (the nested modules require their siblings at the version they
# are released with). The check
#   - builds and vets the root module outside the workspace;
#   - writes a module proxy directory serving every module of go.work at
#     VERSION, made from the working tree (.ci/modproxy; it also fails on a
#     replace directive or a sibling required at another version);
#   - in an empty GOPATH, module cache and build cache, outside the
#     workspace (GOWORK=off), with that directory first in GOPROXY and the
#     real proxy behind it for third-party modules:
#       go install github.com/randflake/randflake/cmd/randflake@VERSION,
#       runs the installed binary (version, gen -n 3),
#       go get of the root module, etcdlease, pglease and kubelease from a new module,
#       which then builds and runs a program using all three.
# RELEASE_CHECK_TIMEOUT (seconds, default 240) bounds every go command.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
. .ci/say.sh release-check

version=${1:-$(awk '$1 == "github.com/randflake/randflake" && $2 ~ /^v/ { print $2; exit }' cmd/randflake/go.mod)}
[ -n "$version" ] || fail "no version given and none found in cmd/randflake/go.mod"
limit=${RELEASE_CHECK_TIMEOUT:-240}

[ -f LICENSE ] || fail "LICENSE is missing"
grep -q "^## \[${version#v}\]" CHANGELOG.md || fail "CHANGELOG.md has no section '## [${version#v}]'"

# The root module needs no sibling: outside the workspace it builds on its
# own go.mod's requirements (the workspace's build list has newer ones).
say "root module outside the workspace: go build, go vet"
GOWORK=off go build ./... || fail "GOWORK=off go build ./... failed in the root module"
GOWORK=off go vet ./... || fail "GOWORK=off go vet ./... failed in the root module"

tmp=$(mktemp -d)
# The module cache is read-only; make it removable.
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

say "module proxy for $version from the working tree"
(cd .ci/modproxy && GOWORK=off go run . -repo "$repo" -version "$version" -out "$tmp/proxy") >"$tmp/sums" ||
	fail "could not write the module proxy (see above)"
sed 's/^/  /' "$tmp/sums"

# A user's machine: nothing cached, no workspace, our modules from the
# proxy directory, everything else from the real proxy.
mkdir -p "$tmp/gopath" "$tmp/home"
export GOPATH="$tmp/gopath" GOMODCACHE="$tmp/gopath/pkg/mod" GOCACHE="$tmp/gocache" GOBIN="$tmp/bin"
export GOWORK=off GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local GOENV=off
export GOPROXY="file://$tmp/proxy,https://proxy.golang.org"
export GONOSUMDB=github.com/randflake/randflake GOPRIVATE=
run() { # description command...
	local what=$1 rc=0
	shift
	timeout "$limit" "$@" >"$tmp/out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		sed 's/^/  | /' "$tmp/out" >&2
		[ "$rc" -eq 124 ] && fail "$what: timed out after ${limit}s: $*"
		fail "$what: exit status $rc: $*"
	fi
}

say "go install github.com/randflake/randflake/cmd/randflake@$version"
run "go install" go install "github.com/randflake/randflake/cmd/randflake@$version"
bin="$GOBIN/randflake"
[ -x "$bin" ] || fail "go install wrote no $bin"
go version -m "$bin" >"$tmp/buildinfo"
for m in github.com/randflake/randflake/cmd/randflake github.com/randflake/randflake github.com/randflake/randflake/etcdlease github.com/randflake/randflake/pglease; do
	grep -qE "^[[:space:]]+(mod|dep)[[:space:]]+$m[[:space:]]+$version([[:space:]]|$)" "$tmp/buildinfo" ||
		{ cat "$tmp/buildinfo" >&2; fail "the installed binary was not built from $m $version"; }
done

if "$bin" version >"$tmp/version" 2>&1; then
	say "randflake version: $(head -1 "$tmp/version")"
	grep -qF -- "$version" "$tmp/version" || fail "'randflake version' does not print $version: $(cat "$tmp/version")"
else
	say "note: 'randflake version' exits non-zero (no such subcommand yet?); checking --help instead"
	"$bin" --help >"$tmp/help" 2>&1 || { cat "$tmp/help" >&2; fail "'randflake --help' failed"; }
fi

say "randflake gen -n 3"
RANDFLAKE_STATE_DIR="$tmp/state" HOME="$tmp/home" timeout 60 "$bin" gen -n 3 >"$tmp/ids" 2>"$tmp/gen.err" ||
	{ cat "$tmp/gen.err" >&2; fail "'randflake gen -n 3' failed"; }
[ "$(grep -cE '^[0-9a-v]{1,13}$' "$tmp/ids")" -eq 3 ] && [ "$(sort -u "$tmp/ids" | wc -l)" -eq 3 ] ||
	{ cat "$tmp/ids" "$tmp/gen.err" >&2; fail "'randflake gen -n 3' did not print 3 distinct IDs"; }
sed 's/^/  /' "$tmp/ids"

say "go get github.com/randflake/randflake@$version github.com/randflake/randflake/etcdlease@$version github.com/randflake/randflake/pglease@$version github.com/randflake/randflake/kubelease@$version in a new module"
mkdir "$tmp/user"
cd "$tmp/user"
run "go mod init" go mod init example.com/user
cat >main.go <<'GO'
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/randflake/randflake"
	"github.com/randflake/randflake/etcdlease"
	"github.com/randflake/randflake/kubelease"
	"github.com/randflake/randflake/pglease"
)

func main() {
	now := time.Now().Unix()
	secret := []byte("0123456789abcdef")
	g, err := randflake.NewGenerator(42, now-1, now+3600, secret)
	if err != nil {
		fmt.Println("NewGenerator:", err)
		os.Exit(1)
	}
	id, err := g.Generate()
	if err != nil {
		fmt.Println("Generate:", err)
		os.Exit(1)
	}
	_, node, _, err := g.Inspect(id)
	if err != nil || node != 42 {
		fmt.Println("Inspect:", node, err)
		os.Exit(1)
	}
	if _, err := etcdlease.New(etcdlease.Config{}); err == nil {
		fmt.Println("etcdlease.New without a client: no error")
		os.Exit(1)
	} else {
		fmt.Println("etcdlease.New:", err)
	}
	if _, err := pglease.New(pglease.Config{}); err == nil {
		fmt.Println("pglease.New without a pool or DSN: no error")
		os.Exit(1)
	} else {
		fmt.Println("pglease.New:", err)
	}
	if _, err := kubelease.New(kubelease.Config{}); err == nil {
		fmt.Println("kubelease.New without a secret: no error")
		os.Exit(1)
	} else {
		fmt.Println("kubelease.New:", err)
	}
	if sql, err := pglease.SchemaSQL("", ""); err != nil || len(sql) == 0 {
		fmt.Println("pglease.SchemaSQL:", err)
		os.Exit(1)
	}
	fmt.Println("id:", randflake.ID(id))
}
GO
run "go get" go get "github.com/randflake/randflake@$version" "github.com/randflake/randflake/etcdlease@$version" "github.com/randflake/randflake/pglease@$version" "github.com/randflake/randflake/kubelease@$version"
run "go mod tidy" go mod tidy
for m in github.com/randflake/randflake github.com/randflake/randflake/etcdlease github.com/randflake/randflake/pglease github.com/randflake/randflake/kubelease; do
	got=$(go list -m -f '{{.Version}}' "$m")
	[ "$got" = "$version" ] || fail "the new module uses $m $got, not $version"
done
run "go vet" go vet ./...
run "go build" go build -o "$tmp/user.bin" .
"$tmp/user.bin" >"$tmp/user.out" 2>&1 || { cat "$tmp/user.out" >&2; fail "the program using the modules failed"; }
sed 's/^/  /' "$tmp/user.out"
say "ok: $version installs and builds from the module proxy"
