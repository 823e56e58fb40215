#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed for the approvals-console browser
# test (run with CODE_EXEC_REQUIRE_BROWSER=1 in CI, so a missing browser fails
# the build instead of skipping). Idempotent and non-interactive.
exec bash "$(dirname "$0")/ensure-apt.sh" chromium chromium
