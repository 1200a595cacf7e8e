#!/usr/bin/env bash
# Interoperability test of package uniqueid against the real Apache httpd
# (Debian's apache2 package, with mod_unique_id). Installs apache2 if it is
# missing, without leaving the distribution's own apache2 service running,
# then runs the Apache tests with RANDFLAKE_REQUIRE_APACHE=1 so that they
# fail rather than skip if httpd cannot be used.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
if ! command -v "$GO" >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  GO=/usr/local/go/bin/go
fi

APACHE_BIN=${RANDFLAKE_APACHE_BIN:-/usr/sbin/apache2}

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo -n "$@"
  else
    echo "apache-interop: need root (or sudo) to run: $*" >&2
    return 1
  fi
}

install_apache() {
  echo "apache-interop: installing apache2"
  export DEBIAN_FRONTEND=noninteractive

  # Forbid maintainer scripts from starting the apache2 service (on hosts
  # with an init system it would otherwise start on port 80). Debian's
  # invoke-rc.d honours /usr/sbin/policy-rc.d; exit status 101 means
  # "action forbidden". Leave an existing policy in place.
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [ ! -e "$policy" ]; then
    as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
    created_policy=1
  fi

  local rc=0
  as_root apt-get install -y --no-install-recommends apache2 ||
    { as_root apt-get update && as_root apt-get install -y --no-install-recommends apache2; } ||
    rc=$?

  if [ "$created_policy" -eq 1 ]; then
    as_root rm -f "$policy"
  fi
  [ "$rc" -eq 0 ] || return "$rc"

  # Should the service have been started anyway, stop that instance (by its
  # own pid file): the test runs its own httpd and needs no other.
  local pidfile
  for pidfile in /run/apache2/apache2.pid /var/run/apache2/apache2.pid; do
    if [ -s "$pidfile" ]; then
      local pid
      pid=$(cat "$pidfile")
      if kill -0 "$pid" 2>/dev/null; then
        echo "apache-interop: stopping the apache2 service started by the install (pid $pid)"
        as_root kill -TERM "$pid" || true
      fi
      break
    fi
  done
}

if [ ! -x "$APACHE_BIN" ]; then
  install_apache
fi

"$APACHE_BIN" -v

RANDFLAKE_REQUIRE_APACHE=1 "$GO" test -count=1 -run 'Apache' -v ./uniqueid/
