#!/usr/bin/env bash
# Compares the model-call and scan benchmarks of two commits side by side in
# one run: both test binaries are built first, then run in alternation,
# ROUNDS times each (default 3), so that the load of the machine falls on
# both alike. Prints, per benchmark, the median over the rounds of each
# build's p50 (ModelCall) or ns/op (CheckJSONCorpus), and for ModelCall
# what the broker adds over the direct call.
#
#   scripts/bench-before-after.sh BEFORE [AFTER]    (AFTER defaults to HEAD)
#
# BEFORE must hold the benchmarks (answercorpus): f342ab3 or later.
set -euo pipefail
cd "$(dirname "$0")/.."
before="${1:?usage: $0 BEFORE [AFTER]}"
after="${2:-HEAD}"
rounds="${ROUNDS:-3}"
benchtime="${BENCHTIME:-2s}"
work=$(mktemp -d)
trap 'git worktree remove --force "$work/before" >/dev/null 2>&1 || true; git worktree remove --force "$work/after" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

for build in before after; do
  rev=$before
  [ "$build" = after ] && rev=$after
  git worktree add -q --detach "$work/$build" "$rev"
  (cd "$work/$build" && go test -c -o "$work/$build-broker.test" ./broker/ && go test -c -o "$work/$build-upstream.test" ./upstream/)
  echo "built $build: $(git rev-parse --short "$rev")"
done

for round in $(seq "$rounds"); do
  for build in before after; do
    (cd "$work/$build/broker" && "$work/$build-broker.test" -test.run '^$' -test.bench 'ModelCall' -test.benchtime "$benchtime") |
      awk -v b="$build" '/^BenchmarkModelCall/ { for (i = 1; i < NF; i++) if ($(i+1) == "p50-ns") print b, $1, $i }' >>"$work/results"
    (cd "$work/$build/upstream" && "$work/$build-upstream.test" -test.run '^$' -test.bench 'CheckJSONCorpus' -test.benchtime 1s) |
      awk -v b="$build" '/^BenchmarkCheckJSONCorpus/ { print b, $1, $3 }' >>"$work/results"
  done
  echo "round $round done"
done

# Median per build and benchmark, then the table.
sort -k1,2 -k3n "$work/results" | awk '
  { key = $1 " " $2; v[key, ++n[key]] = $3 }
  END { for (k in n) { m = n[k]; print k, v[k, int((m + 1) / 2)] } }' >"$work/medians"
table() { # $1: the rows' name pattern; reads the medians
  awk -v pat="$1" -v mode="$2" '
    function ms(ns) { return sprintf("%.3f", ns / 1e6) }
    { name = $2; sub(/-[0-9]+$/, "", name); val[$1, name] = $3; names[name] = 1 }
    END {
      for (n in names) if (n ~ pat) {
        if (mode == "scan") { printf "| %s | %s ms | %s ms |\n", n, ms(val["before", n]), ms(val["after", n]); continue }
        base = n; sub(/\/direct$/, "", base); brk = base "/broker"; a = base; sub(/^BenchmarkModelCall\//, "", a)
        printf "| %s | %s / %s ms | %s / %s ms | %s / %s ms |\n", a,
          ms(val["before", n]), ms(val["after", n]), ms(val["before", brk]), ms(val["after", brk]),
          ms(val["before", brk] - val["before", n]), ms(val["after", brk] - val["after", n])
      }
    }' "$work/medians" | sort
}
echo "| benchmark | before | after |"
echo "| --- | --- | --- |"
table '^BenchmarkCheckJSONCorpus' scan
echo
echo "| answer | direct p50 (before / after) | broker p50 (before / after) | added (before / after) |"
echo "| --- | --- | --- | --- |"
table '/direct$' call
cp "$work/results" "${RESULTS:-/tmp/bench-before-after.txt}"
echo "raw results: ${RESULTS:-/tmp/bench-before-after.txt}"
