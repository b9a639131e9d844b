#!/usr/bin/env bash
# Build a Debian bookworm base image from Debian packages alone and tag it NAME.
#
# Why: where no container image registry is reachable (as on the build machines) the
# Containerfile's default base (debian:bookworm-slim) cannot be pulled, but the Debian
# mirror can be: mmdebstrap makes the same minimal system (variant minbase) into a tar
# that `podman import` turns into an image (about 2 minutes).
#   usage: container/base-image.sh [NAME]     (default localhost/netsense-base:bookworm)
# DEBIAN_MIRROR and DEBIAN_SECURITY override the archives; PODMAN the podman command line.
set -euo pipefail
NAME=${1:-localhost/netsense-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
PODMAN=${PODMAN:-podman --runtime runc}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "base-image: mmdebstrap bookworm (minbase) from $MIRROR"
mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm "$tmp/base.tar" \
  "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" \
  "deb $SECURITY bookworm-security main"
$PODMAN import --quiet --change 'CMD ["/bin/bash"]' "$tmp/base.tar" "$NAME" >/dev/null
echo "base-image: tagged $NAME"
