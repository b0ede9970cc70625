#!/bin/sh
# The test network script refuses bad arguments with a message naming the valid choices, exit 2,
# before it creates anything (no root needed for these checks).
script=$1
fail=0
expect() {  # expect "message part" args...
  want=$1; shift
  out=$("$script" "$@" 2>&1); rc=$?
  if [ "$rc" -ne 2 ] || ! printf '%s' "$out" | grep -q -- "$want"; then
    echo "FAIL: netcluster.sh $* -> rc $rc: $out"; fail=1
  fi
}
expect "host count must be 2..64" -n 1 -- true
expect "host count must be 2..64" -n x -- true
expect "valid rates are unlimited" -r fast -- true
expect "no COMMAND given" -n 2
exit $fail
