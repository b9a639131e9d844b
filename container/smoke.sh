#!/usr/bin/env bash
# `make container-smoke`: build the image, run a scenario (default smoke) in an unprivileged
# container -- no --privileged, no --cap-add -- and copy its run folders out.
#
# Inside, netsense has no CAP_NET_ADMIN, so it takes its rootless path (a user + network +
# mount namespace of its own).  Installs podman, runc, uidmap and mmdebstrap via apt when
# missing, like `make setup` does for mininet.  Podman with the runc runtime: crun fails on
# hybrid cgroup (v1 + v2) machines.  Settings (environment):
#   CONTAINER_IMAGE  image to build and run          (localhost/netsense:dev)
#   CONTAINER_BASE   the image FROM starts with; when it is localhost/netsense-base:* and
#                    absent it is built from Debian packages (container/base-image.sh)
#   CONTAINER_OUT    where the run folders go        (results/container)
#   SCENARIO         scenario to run                 (smoke)
#   CONTAINER_TIMEOUT_S  the run's container is killed after this many seconds (900)
#   PIP_PY           python whose pip sources the build reuses (python3; container/pip_sources.py)
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${CONTAINER_IMAGE:-localhost/netsense:dev}
BASE=${CONTAINER_BASE:-localhost/netsense-base:bookworm}
OUT=${CONTAINER_OUT:-results/container}
SCENARIO=${SCENARIO:-smoke}
RUN_TIMEOUT_S=${CONTAINER_TIMEOUT_S:-900}  # the container is killed after this (a hung run)
PIP_PY=${PIP_PY:-python3}
export PODMAN="podman --runtime runc"

missing=""
for t in podman runc newuidmap mmdebstrap; do command -v $t >/dev/null 2>&1 || missing=1; done
if [ -n "$missing" ]; then
  echo "container-smoke: installing podman runc uidmap mmdebstrap"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    podman runc uidmap mmdebstrap >/dev/null
fi

# Podman's default open-files and process limits are refused where the hard limits are
# lower (runc: "error setting rlimit"); measured here: nproc 32768 was accepted, 49152 not,
# under a hard limit of 96362.  Ample for the testbed: 2-8 workers and their threads.
cap() { local hard; hard=$(ulimit -H "$1"); [ "$hard" = unlimited ] || [ "$hard" -gt "$2" ] && echo "$2" || echo "$hard"; }
nofile=$(cap -n 8192); nproc=$(cap -u 4096)
ulimit_args=(--ulimit="nofile=$nofile:$nofile" --ulimit="nproc=$nproc:$nproc")

t0=$SECONDS
if ! $PODMAN image exists "$BASE"; then
  case "$BASE" in
    localhost/netsense-base:*) container/base-image.sh "$BASE" ;;
    *) $PODMAN pull "$BASE" ;;
  esac
fi
t_base=$((SECONDS - t0))

mapfile -t pip_args < <("$PIP_PY" container/pip_sources.py 2>/dev/null || true)
mkdir -p "$OUT"
old_id=$($PODMAN image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
echo "container-smoke: building $IMAGE from $BASE (log: $OUT/build.log)"
if ! $PODMAN build "${ulimit_args[@]}" --build-arg "BASE=$BASE" "${pip_args[@]}" \
     -t "$IMAGE" -f Containerfile . >"$OUT/build.log" 2>&1; then
  tail -n 30 "$OUT/build.log"
  echo "container-smoke: the image build failed (whole log: $OUT/build.log)" >&2
  exit 1
fi
t_build=$((SECONDS - t0 - t_base))
new_id=$($PODMAN image inspect --format '{{.Id}}' "$IMAGE")
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  $PODMAN rmi "$old_id" >/dev/null 2>&1 || true  # the image this build replaced, by its ID
fi

name="netsense-smoke-$$-$RANDOM"
trap '$PODMAN rm --force --ignore "$name" >/dev/null 2>&1 || true' EXIT
echo "container-smoke: running scenario $SCENARIO in container $name (unprivileged)"
rc=0
$PODMAN run --name "$name" "${ulimit_args[@]}" --timeout="$RUN_TIMEOUT_S" "$IMAGE" \
  netsense run "$SCENARIO" --results /home/netsense/results --quiet || rc=$?
t_run=$((SECONDS - t0 - t_base - t_build))
$PODMAN cp "$name:/home/netsense/results/." "$OUT/"
echo "container-smoke: run folders in $OUT/$SCENARIO; base ${t_base}s, build ${t_build}s," \
  "run ${t_run}s, all ${SECONDS}s"
[ $rc = 0 ] || exit $rc
# Say so when the runs did not take the rootless path: then the container was privileged.
"$PIP_PY" - "$OUT/$SCENARIO" <<'PY'
import json, sys
from pathlib import Path
modes = {json.loads(p.read_text())["host"].get("emulation")
         for p in Path(sys.argv[1]).glob("*/config.json")}
if modes != {"rootless"}:
    sys.exit(f"container-smoke: expected rootless runs in the container, found {modes}")
PY
