#!/usr/bin/env bash
# Build a local base image for canopy without an image registry: a Debian bookworm root file
# system made by debootstrap (Python 3.11, venv, Java 17 for the Spark jobs, Redis for Ray's GCS), imported with
# `docker import`. Pass it to the image build as the base:
#
#   deploy/image/base.sh                       # -> canopy-base:bookworm
#   docker build --network host --build-arg BASE=canopy-base:bookworm -f deploy/image/Dockerfile .
#
# Needs root, debootstrap (apt-get install debootstrap) and a Debian mirror: $CANOPY_DEBIAN_MIRROR
# (default http://deb.debian.org/debian; an air-gapped site points it at its own mirror).
set -euo pipefail
tag=${1:-canopy-base:bookworm}
mirror=${CANOPY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-venv,python3-pip,ca-certificates,openjdk-17-jre-headless,procps,tini,redis-server
root=$(mktemp -d /var/tmp/canopy-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "base: debootstrap bookworm from $mirror into $root" >&2
debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >&2
# what a registry's slim image would not carry: apt lists and caches, documentation
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
       "$root"/usr/share/doc/* "$root"/usr/share/man/*
echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"
tar -C "$root" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "canopy base: debootstrap bookworm ($packages)" - "$tag" >&2
echo "$tag"
