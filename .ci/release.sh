#!/usr/bin/env bash
# Release binaries of the randflake command.
#
#   .ci/release.sh VERSION OUTDIR
#
# Cross-compiles cmd/randflake from the working tree (check out the release
# tag first) for linux, darwin and windows on amd64 and arm64: CGO_ENABLED=0,
# -trimpath, and VERSION stamped into main.version. Writes to OUTDIR one
# archive per platform, randflake_VERSION_OS_ARCH.tar.gz (.zip for windows)
# holding a directory of the same name with the binary, LICENSE, README.md
# and CHANGELOG.md, and SHA256SUMS over the archives. Archive timestamps are
# the commit's time (or SOURCE_DATE_EPOCH), so that a rebuild of the same
# commit with the same Go gives the same archives.
set -euo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 VERSION OUTDIR   (VERSION like v0.2.0)" >&2
	exit 2
fi
version=$1
out=$2
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	{ echo "release: VERSION must look like v1.2.3 or v1.2.3-rc.1, not '$version'" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64)
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

archives=()
for p in "${platforms[@]}"; do
	goos=${p%/*} goarch=${p#*/}
	name="randflake_${version}_${goos}_${goarch}"
	exe=randflake
	[ "$goos" = windows ] && exe=randflake.exe
	mkdir -p "$work/$name"
	echo "release: building $p"
	CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -C cmd/randflake -trimpath \
		-ldflags "-s -w -X main.version=$version" -o "$work/$name/$exe" . ||
		{ echo "release: go build for $p failed" >&2; exit 1; }
	cp LICENSE README.md CHANGELOG.md "$work/$name/"
	touch -d "@$epoch" "$work/$name" "$work/$name"/*
	if [ "$goos" = windows ]; then
		archive="$name.zip"
		rm -f "$out/$archive"
		(cd "$work" && zip -q -X -r "$out/$archive" "$name")
	else
		archive="$name.tar.gz"
		(cd "$work" && tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -cf - "$name" |
			gzip -n -9 >"$out/$archive")
	fi
	archives+=("$archive")
done
(cd "$out" && sha256sum "${archives[@]}" >SHA256SUMS)
echo "release: wrote ${#archives[@]} archives and SHA256SUMS to $out"
