#!/usr/bin/env bash
# Makes sure Debian's HAProxy is installed for the replicas test, which puts
# it before several servers (run with CODE_EXEC_REQUIRE_HAPROXY=1 in CI, so a
# missing load balancer fails the build instead of skipping).
exec bash "$(dirname "$0")/ensure-apt.sh" haproxy haproxy
