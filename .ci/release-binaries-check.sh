#!/usr/bin/env bash
# CI: the release binaries. Runs .ci/release.sh into a temp dir, checks
# SHA256SUMS, unpacks every archive, checks each binary's platform with
# file(1), and runs the linux/amd64 binary and the linux/arm64 one (under
# qemu-aarch64-static): `randflake version` must print the stamped version.
#
#   .ci/release-binaries-check.sh [VERSION]   (default v0.0.0-ci)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-v0.0.0-ci}
. .ci/say.sh release-binaries
command -v file >/dev/null || fail "file(1) is not installed"
command -v qemu-aarch64-static >/dev/null || fail "qemu-aarch64-static is not installed"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
say "building $version"
.ci/release.sh "$version" "$tmp/dist" >"$tmp/release.log" 2>&1 || { cat "$tmp/release.log" >&2; fail ".ci/release.sh failed"; }
(cd "$tmp/dist" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match the archives"

# platform, archive suffix, binary name, what file(1) must say
expect=(
	"linux/amd64 tar.gz randflake ELF 64-bit LSB executable, x86-64, .*statically linked"
	"linux/arm64 tar.gz randflake ELF 64-bit LSB executable, ARM aarch64, .*statically linked"
	"darwin/amd64 tar.gz randflake Mach-O 64-bit x86_64 executable"
	"darwin/arm64 tar.gz randflake Mach-O 64-bit arm64 executable"
	"windows/amd64 zip randflake.exe PE32\+ executable \(console\) x86-64"
	"windows/arm64 zip randflake.exe PE32\+ executable \(console\) Aarch64"
)
n=$(grep -c . "$tmp/dist/SHA256SUMS")
[ "$n" -eq ${#expect[@]} ] || fail "SHA256SUMS lists $n archives, not ${#expect[@]}"
mkdir "$tmp/x"
for e in "${expect[@]}"; do
	read -r platform suffix exe want <<<"$e"
	name="randflake_${version}_${platform%/*}_${platform#*/}"
	archive="$tmp/dist/$name.$suffix"
	[ -f "$archive" ] || fail "no archive $name.$suffix"
	grep -q "  $name.$suffix\$" "$tmp/dist/SHA256SUMS" || fail "$name.$suffix is not in SHA256SUMS"
	if [ "$suffix" = zip ]; then
		(cd "$tmp/x" && unzip -q "$archive") || fail "cannot unpack $name.$suffix"
	else
		tar -xzf "$archive" -C "$tmp/x" || fail "cannot unpack $name.$suffix"
	fi
	for f in "$exe" LICENSE README.md CHANGELOG.md; do
		[ -f "$tmp/x/$name/$f" ] || fail "$name.$suffix has no $name/$f"
	done
	got=$(file -b "$tmp/x/$name/$exe")
	[[ $got =~ ^$want ]] || fail "$platform: file(1) says '$got', expected /^$want/"
	printf '  %-14s %s\n' "$platform" "${got%%, Go BuildID*}"
done

check_runs() { # platform runner...
	local platform=$1
	shift
	local bin="$tmp/x/randflake_${version}_${platform%/*}_${platform#*/}/randflake"
	if "$@" "$bin" version >"$tmp/out" 2>&1; then
		grep -qF -- "$version" "$tmp/out" || fail "$platform: 'randflake version' does not print $version: $(cat "$tmp/out")"
		say "$platform: randflake version: $(head -1 "$tmp/out")"
	else
		"$@" "$bin" --help >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; fail "$platform: 'randflake --help' failed"; }
		say "$platform: note: 'randflake version' is not there (exit non-zero); 'randflake --help' exits 0"
	fi
}
check_runs linux/amd64
check_runs linux/arm64 qemu-aarch64-static
say "ok"
