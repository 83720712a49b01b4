#!/usr/bin/env bash
# Runs the README's test command (scripts/test.sh) on a fresh clone of this
# checkout's HEAD beside two CPU-bound processes, the load under which the
# suite must pass. With --pause, it also stops the test binaries now and
# then for 100-300 ms (SIGSTOP, then SIGCONT). Prints the run's time and
# exit status on its last line; extra arguments go to scripts/test.sh.
#
# Usage: scripts/stress.sh [--pause] [test.sh arguments]
set -uo pipefail
cd "$(dirname "$0")/.."

pause=
if [ "${1:-}" = --pause ]; then
  pause=1
  shift
fi

dir=$(mktemp -d /tmp/jobonce-stress.XXXXXX)
git clone -q . "$dir"
pids=()
yes >/dev/null & pids+=($!)
yes >/dev/null & pids+=($!)
if [ -n "$pause" ]; then
  (
    while sleep "$((1 + RANDOM % 3))"; do
      stopped=$(pgrep -f '\.test( |$)' || true)
      [ -n "$stopped" ] || continue
      kill -STOP $stopped 2>/dev/null
      sleep "0.$((100 + RANDOM % 201))" 2>/dev/null || sleep 0.2
      kill -CONT $stopped 2>/dev/null
    done
  ) & pids+=($!)
fi
start=$(date +%s)
(cd "$dir" && scripts/test.sh "$@")
status=$?
kill "${pids[@]}" 2>/dev/null
pkill -CONT -f '\.test( |$)' 2>/dev/null
rm -rf "$dir"
echo "stress: status $status in $(( $(date +%s) - start )) s"
exit "$status"
