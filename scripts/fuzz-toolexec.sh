#!/usr/bin/env bash
# The -toolexec of scripts/fuzz-smoke.sh's builds: the compiler
# instruments for coverage only the module's own packages, not their
# dependencies.
#
# Why: go test -fuzz instruments every package of the test binary but a
# few of the runtime's, and after each execution the fuzzing worker copies
# and scans every counter. In the worker package's binary (net/http, the
# MCP SDK, JSON Schema and the rest) those were 161 KB, which cost about
# two thirds of each execution; the module's own packages hold 16 KB, and
# the same 20,000 executions take a third of the time. What the fuzzer
# steers by is then the branches of our parsers, the code under test.
#
# The compiler's version line gets a suffix, so that the go command keys
# these builds apart from the fully instrumented ones in its cache (it
# names a compiler by that line).
set -euo pipefail
tool=$1
shift
case "${tool##*/}" in
compile) ;;
*) exec "$tool" "$@" ;;
esac
if [ "$*" = "-V=full" ]; then
  echo "$("$tool" -V=full) rtsandbox-fuzz-own-packages"
  exit 0
fi
module=github.com/rtsandbox/rtsandbox
pkg="" prev=""
for a in "$@"; do
  if [ "$prev" = "-p" ]; then pkg=$a; fi
  prev=$a
done
case "$pkg" in
"$module" | "$module"/* | "$module"_test) exec "$tool" "$@" ;; # a package's external test is under "$module"/
esac
args=()
for a in "$@"; do
  if [ "$a" != "-d=libfuzzer" ]; then args+=("$a"); fi
done
exec "$tool" "${args[@]}"
