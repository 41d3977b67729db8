#!/bin/sh
# expect_exit.sh CODE PATTERN COMMAND...: passes when COMMAND exits with CODE
# and its output (stdout and stderr) matches the grep pattern PATTERN.
want=$1 pattern=$2
shift 2
out=$("$@" 2>&1)
got=$?
printf '%s\n' "$out"
if [ "$got" -ne "$want" ]; then
  echo "expect_exit: exit code $got, expected $want" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -q -- "$pattern"; then
  echo "expect_exit: output does not match \"$pattern\"" >&2
  exit 1
fi
