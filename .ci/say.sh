# Sourced by the CI check scripts, after `set -euo pipefail` and the cd to
# the repository: `. .ci/say.sh NAME` defines say (a progress line: NAME,
# the message and the seconds since sourcing) and fail (the message on
# stderr, exit 1).
say_name=$1
say_start=$SECONDS
say() { printf '%s: %s (%ds)\n' "$say_name" "$*" $((SECONDS - say_start)); }
fail() { printf '%s: FAIL: %s\n' "$say_name" "$*" >&2; exit 1; }
