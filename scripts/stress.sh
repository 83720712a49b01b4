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
suite=
# On any exit: the loops stop, the suite's processes run again (or, when
# it is cut short, end), and the clone goes.
stop() {
  kill "${pids[@]}" 2>/dev/null
  if [ -n "$suite" ]; then
    kill -CONT $(pgrep -s "$suite") 2>/dev/null
    kill -0 "$suite" 2>/dev/null && kill -- -"$suite" 2>/dev/null
  fi
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM
yes >/dev/null & pids+=($!)
yes >/dev/null & pids+=($!)
start=$(date +%s)
# The suite runs in a session of its own, so that the pauses stop its test
# binaries and no other process's.
setsid bash -c 'cd "$0" && exec scripts/test.sh "$@"' "$dir" "$@" &
suite=$!
if [ -n "$pause" ]; then
  (
    while sleep "$((1 + RANDOM % 3))"; do
      stopped=$(pgrep -s "$suite" -f '\.test( |$)' || true)
      [ -n "$stopped" ] || continue
      kill -STOP $stopped 2>/dev/null
      sleep "0.$((100 + RANDOM % 201))" 2>/dev/null || sleep 0.2
      kill -CONT $stopped 2>/dev/null
    done
  ) & pids+=($!)
fi
wait "$suite"
status=$?
echo "stress: status $status in $(( $(date +%s) - start )) s"
exit "$status"
