#!/usr/bin/env bash
# Registers gVisor (runsc) with the local Docker daemon as the runtime
# "runsc", with --network=none and --host-uds=open (docs/operations.md,
# "gVisor"), idempotently:
# it merges one entry into the daemon's config file, keeping every other
# key, and makes the running dockerd reload it with SIGHUP (runtimes are
# among the settings a reload applies; the daemon and its containers keep
# running). Nothing happens when the daemon already lists runsc with
# exactly these arguments. A config file that is not valid JSON is left untouched
# and the script fails. Needs jq, runsc on PATH and root.
set -euo pipefail
conf="${DOCKERD_CONFIG:-/etc/docker/daemon.json}"
runsc=$(command -v runsc) || { echo "runsc-register: runsc is not installed (apt-get install runsc)" >&2; exit 1; }

args='["--network=none","--host-uds=open"]'
registered() {
  docker info --format '{{json .Runtimes}}' 2>/dev/null |
    jq -e --argjson args "$args" '.runsc.runtimeArgs == $args' >/dev/null
}
registered && exit 0

mkdir -p "$(dirname "$conf")"
[ -s "$conf" ] || echo '{}' >"$conf"
tmp=$(mktemp "$conf.XXXXXX")
trap 'rm -f "$tmp"' EXIT
jq --arg path "$runsc" --argjson args "$args" '.runtimes.runsc = {path: $path, runtimeArgs: $args}' "$conf" >"$tmp"
chmod 0644 "$tmp"
mv "$tmp" "$conf"

pids=$(pgrep -x dockerd || true)
if [ "$(echo "$pids" | wc -w)" -ne 1 ]; then
  echo "runsc-register: wrote $conf; expected one dockerd to reload, found: ${pids:-none}" >&2
  exit 1
fi
kill -HUP "$pids"
# The reload is asynchronous; wait for it, bounded (10 s).
for _ in $(seq 1 50); do
  registered && { echo "runsc-register: runsc registered ($runsc --network=none --host-uds=open)"; exit 0; }
  sleep 0.2
done
echo "runsc-register: dockerd did not list runsc after SIGHUP; see its log" >&2
exit 1
