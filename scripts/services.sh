#!/usr/bin/env bash
# (Re)start the services the tests and the demo need, installing them from Debian's packages
# when a fresh machine lacks them. Never assumes a service is up.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}
# A daemon's Debian package starts its service from postinst through invoke-rc.d when no
# systemd runs (as on these machines); a policy-rc.d answering 101 forbids that. Container
# images ship one already: it is kept; else one is in place for this install only.
apt_install_no_start() {
  if [ -e /usr/sbin/policy-rc.d ]; then apt_install "$@"; return; fi
  printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
  as_root chmod 755 /usr/sbin/policy-rc.d
  local status=0
  apt_install "$@" || status=$?
  as_root rm -f /usr/sbin/policy-rc.d
  return "$status"
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = "PONG" ]; }

if ! pg_up; then
  command -v pg_ctlcluster >/dev/null || apt_install postgresql postgresql-client
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ -z "$version" ]; then echo "no PostgreSQL cluster found" >&2; exit 1; fi
  hba=/etc/postgresql/$version/main/pg_hba.conf
  # Tests connect as postgres over loopback without a password, as on the dev machines.
  if ! grep -qE '^host\s+all\s+all\s+127.0.0.1/32\s+trust' "$hba"; then
    as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  fi
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
  pg_up || { echo "PostgreSQL did not come up" >&2; exit 1; }
  echo "started PostgreSQL $version"
fi

if ! redis_up; then
  command -v redis-server >/dev/null || apt_install redis-server redis-tools
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis_up && break; sleep 0.5; done
  redis_up || { echo "Redis did not come up" >&2; exit 1; }
  echo "started Redis"
fi

# Headless Chromium renders Flower's pages for the browser test and the demo's screenshot.
command -v chromium >/dev/null || apt_install chromium
# promtool checks the alert rules and runs their unit tests (tests/test_alerts.py); the
# prometheus daemon runs only when scripts/render_dashboard.py starts one on a spare port.
command -v promtool >/dev/null || apt_install_no_start --no-install-recommends prometheus
echo "services: PostgreSQL and Redis are up"
