#!/usr/bin/env bash
# The container image: builds the static randflake binary the way
# .ci/release.sh does, builds the image of Dockerfile around it with
# podman, checks what `podman image inspect` says of it (a non-root numeric
# user, the entrypoint, the command, port 8080/tcp, the labels), saves it,
# takes the binary back out of the saved image's layers, and runs that
# binary with the image's entrypoint, command and environment (listening
# on a loopback port instead of :8080, as the image's user when this runs
# as root) until GET /readyz and GET /v1/ids?count=3 answer. If `podman
# run` works on this machine, the image itself is run too.
#
#   .ci/image-check.sh [VERSION]   (default v0.0.0-image)
#
# Needs go, podman, jq, curl, file and ldd; with CI set, installs podman
# and jq when missing. Keeps nothing: the image is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-v0.0.0-image}
. .ci/say.sh image-check
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
	fail "VERSION must look like v1.2.3 or v1.2.3-rc.1, not '$version'"

missing=()
command -v podman >/dev/null || missing+=(podman)
command -v jq >/dev/null || missing+=(jq)
if [ ${#missing[@]} -gt 0 ]; then
	[ -n "${CI:-}" ] || fail "not installed: ${missing[*]} (apt-get install ${missing[*]}; CI=1 installs them)"
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for tool in go curl file ldd; do
	command -v $tool >/dev/null || fail "$tool is not installed"
done

tmp=$(mktemp -d)
image="localhost/randflake-image-check:$version-$$"
pid=
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	podman rmi -f "$image" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

# 1. The binary, as .ci/release.sh builds it for this machine's architecture.
goarch=$(go env GOARCH)
mkdir "$tmp/context"
say "building the linux/$goarch binary, version $version"
CGO_ENABLED=0 GOOS=linux GOARCH=$goarch go build -C cmd/randflake -trimpath \
	-ldflags "-s -w -X main.version=$version" -o "$tmp/context/randflake" . ||
	fail "go build failed"
cp LICENSE "$tmp/context/"
kind=$(file -b "$tmp/context/randflake")
[[ $kind == *"statically linked"* ]] || fail "the binary is not static: file(1) says '$kind'"
if lddout=$(ldd "$tmp/context/randflake" 2>&1); then
	fail "ldd lists shared libraries of the binary: $lddout"
fi
[[ $lddout == *"not a dynamic executable"* ]] || fail "ldd does not say 'not a dynamic executable': $lddout"
say "static: ${kind%%, Go BuildID*}"

# 2. The image.
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
say "podman build $image"
podman build -q --format oci -f Dockerfile --build-arg VERSION="$version" --build-arg REVISION="$revision" \
	-t "$image" "$tmp/context" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; fail "podman build failed"; }

# 3. What the image says it is.
podman image inspect "$image" >"$tmp/inspect.json" || fail "podman image inspect failed"
field() { jq -c --exit-status ".[0].$1" "$tmp/inspect.json" 2>/dev/null || echo null; }
expect() { # field want
	local got
	got=$(field "$1")
	[ "$got" = "$2" ] || fail "image $1 is $got, want $2"
}
user=$(jq -r '.[0].Config.User // ""' "$tmp/inspect.json")
[[ $user =~ ^([0-9]+):([0-9]+)$ ]] || fail "image Config.User is '$user', want a numeric UID:GID"
uid=${BASH_REMATCH[1]} gid=${BASH_REMATCH[2]}
[ "$uid" -ne 0 ] || fail "image Config.User is '$user': the image runs as root"
expect Config.Entrypoint '["/randflake"]'
expect Config.Cmd '["serve","--listen",":8080"]'
expect 'Config.ExposedPorts | keys' '["8080/tcp"]'
expect 'Config.Labels["org.opencontainers.image.version"]' "\"$version\""
expect 'Config.Labels["org.opencontainers.image.licenses"]' '"MIT"'
expect 'Config.Labels["org.opencontainers.image.source"]' '"https://github.com/randflake/randflake"'
expect 'Config.Labels["org.opencontainers.image.revision"]' "\"$revision\""
expect Os '"linux"'
expect Architecture "\"$goarch\""
size=$(jq -r '.[0].Size' "$tmp/inspect.json")
say "inspect: User $user, Entrypoint $(field Config.Entrypoint), Cmd $(field Config.Cmd), ExposedPorts $(field 'Config.ExposedPorts | keys'), Env $(field Config.Env), size $size bytes"

# 4. The binary out of the saved image: the last layer that holds it wins,
# as in the container's file system.
podman save -q --format docker-archive -o "$tmp/image.tar" "$image" >/dev/null || fail "podman save failed"
mkdir "$tmp/saved" "$tmp/rootfs"
tar -xf "$tmp/image.tar" -C "$tmp/saved" || fail "cannot unpack the saved image"
mapfile -t layers < <(jq -r '.[0].Layers[]' "$tmp/saved/manifest.json")
[ ${#layers[@]} -gt 0 ] || fail "the saved image's manifest.json lists no layers"
found=
for layer in "${layers[@]}"; do
	listing=$(tar -tvf "$tmp/saved/$layer") || fail "cannot read layer $layer"
	while read -r mode owner _ _ _ member _; do
		case ${member#./} in
		randflake | /randflake) ;;
		*) continue ;;
		esac
		[[ $mode == -r?x* && $mode != -????w* && $mode != -???????w* ]] ||
			fail "/randflake in layer $layer has mode $mode: want executable, and writable by its owner only"
		[[ $owner == 0/0 || $owner == root/root ]] ||
			fail "/randflake in layer $layer belongs to $owner, want root (so that user $uid cannot change it)"
		tar -xf "$tmp/saved/$layer" -C "$tmp/rootfs" "$member" || fail "cannot extract /randflake from layer $layer"
		found=$layer
	done <<<"$listing"
done
[ -n "$found" ] || fail "no layer of the saved image holds /randflake"
cmp -s "$tmp/context/randflake" "$tmp/rootfs/randflake" || fail "the image's /randflake is not the binary just built"
say "saved image: ${#layers[@]} layer(s); /randflake from layer ${found%.tar} is the binary just built"

# 5. Run it as the image would: entrypoint + command + environment, with a
# loopback listen address appended, a new secret and an empty state
# directory; as the image's user when this runs as root.
mapfile -t argv < <(jq -r '.[0].Config.Entrypoint[], (.[0].Config.Cmd // [])[]' "$tmp/inspect.json")
mapfile -t imgenv < <(jq -r '(.[0].Config.Env // [])[]' "$tmp/inspect.json")
[ "${argv[0]}" = /randflake ] || fail "the entrypoint is '${argv[0]}', not /randflake"
argv[0]=$tmp/rootfs/randflake
run=$tmp/run
mkdir -m 0700 "$run" "$run/state"
"$tmp/rootfs/randflake" keygen --out "$run/secret" >/dev/null 2>"$tmp/keygen.log" ||
	{ cat "$tmp/keygen.log" >&2; fail "randflake keygen failed"; }
as=()
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	chmod 0711 "$tmp" "$tmp/rootfs"
	chown -R "$uid:$gid" "$run"
	as=(setpriv --reuid "$uid" --regid "$gid" --clear-groups --)
	say "running as the image's user $uid:$gid"
fi
env -i "${imgenv[@]}" RANDFLAKE_SECRET_FILE="$run/secret" RANDFLAKE_STATE_DIR="$run/state" \
	"${as[@]}" "${argv[@]}" --listen 127.0.0.1:0 >"$tmp/serve.out" 2>"$tmp/serve.log" &
pid=$!
addr=
for _ in $(seq 1 300); do
	addr=$(sed -n 's/.*msg=serving addr=\([^ ]*\).*/\1/p; s/.*"msg":"serving","addr":"\([^"]*\)".*/\1/p' "$tmp/serve.log" | head -1)
	[ -n "$addr" ] && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/serve.log" >&2; fail "serve exited before serving"; }
	sleep 0.1
done
[ -n "$addr" ] || { cat "$tmp/serve.log" >&2; fail "serve did not say where it listens within 30 s"; }
[[ $addr == 127.0.0.1:* ]] || fail "serve listens on $addr, not on the loopback address appended to the command"
url=http://$addr
ready=
for _ in $(seq 1 300); do
	if code=$(curl -s -o "$tmp/readyz" -w '%{http_code}' "$url/readyz") && [ "$code" = 200 ]; then
		ready=1
		break
	fi
	sleep 0.1
done
[ -n "$ready" ] || { cat "$tmp/serve.log" >&2; fail "GET /readyz did not answer 200 within 30 s (last: ${code:-no answer})"; }
jq -e '.status == "ready"' "$tmp/readyz" >/dev/null 2>&1 ||
	fail "GET /readyz answered 200 without status \"ready\": $(head -c 200 "$tmp/readyz")"
code=$(curl -s -o "$tmp/ids.json" -w '%{http_code}' "$url/v1/ids?count=3") || fail "GET /v1/ids?count=3: no answer"
[ "$code" = 200 ] || fail "GET /v1/ids?count=3 answered $code: $(head -c 300 "$tmp/ids.json")"
jq -e '(.ids | length) == 3 and (.ids | unique | length) == 3 and all(.ids[]; test("^[0-9a-v]{1,13}$"))' "$tmp/ids.json" >/dev/null ||
	fail "GET /v1/ids?count=3 did not give 3 distinct IDs: $(head -c 300 "$tmp/ids.json")"
if grep -qiF "$(tr -d '\n' <"$run/secret")" "$tmp/serve.log" "$tmp/serve.out" "$tmp/ids.json"; then
	fail "the secret appears in the output"
fi
say "GET /readyz 200, GET /v1/ids?count=3: $(jq -c .ids "$tmp/ids.json")"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
[ "$status" -eq 0 ] || { cat "$tmp/serve.log" >&2; fail "serve exited $status after SIGTERM, want 0"; }
say "SIGTERM: serve exited 0"

# 6. The image itself, where containers can run.
if podman run --rm --network none "$image" version >"$tmp/run.out" 2>&1; then
	grep -qF "randflake $version" "$tmp/run.out" || fail "podman run $image version printed: $(head -3 "$tmp/run.out")"
	say "podman run: $(head -1 "$tmp/run.out")"
else
	say "note: podman run does not work on this machine, so the image was not started: $(tail -1 "$tmp/run.out")"
fi
say "ok"
