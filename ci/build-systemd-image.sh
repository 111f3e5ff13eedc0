#!/usr/bin/env bash
# Build localhost/debian-systemd:bookworm from Debian packages only (no registry pull):
# a Debian 12 rootfs whose PID 1 is systemd, for Molecule's podman driver.
# Idempotent: does nothing if the image already exists (set REBUILD=1 to force).
# Needs root, podman and mmdebstrap (or debootstrap with USE_DEBOOTSTRAP=1); ci/molecule.sh installs them.
set -euo pipefail
IMAGE=${IMAGE:-localhost/debian-systemd:bookworm}
SUITE=${SUITE:-bookworm}
# Use the mirror apt already uses on this machine (deb822 sources or legacy list).
MIRROR=${MIRROR:-$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
: "${MIRROR:?no Debian mirror found in /etc/apt/sources.list.d/debian.sources; set MIRROR}"
if [[ "${REBUILD:-0}" != 1 ]] && podman image exists "$IMAGE"; then
  echo "image $IMAGE already present"; exit 0
fi
WORK=$(mktemp -d /var/tmp/sysd-img.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# Extra CAs of this machine (TLS-intercepting egress): without them pip/curl
# inside the container fail with CERTIFICATE_VERIFY_FAILED.
mkdir -p "$WORK/ca"
cp /usr/local/share/ca-certificates/*.crt "$WORK/ca/" 2>/dev/null || true
PKGS=systemd,systemd-sysv,dbus,python3,python3-apt,ca-certificates,iproute2,procps,sudo,curl
if [[ -z ${USE_DEBOOTSTRAP:-} ]] && command -v mmdebstrap >/dev/null; then
  mmdebstrap --variant=minbase --include="$PKGS" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook="cp $WORK/ca/*.crt \"\$1/usr/local/share/ca-certificates/\" 2>/dev/null || true" \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null' \
    --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"' \
    --customize-hook='rm -f "$1/etc/hostname"; : > "$1/etc/machine-id"' \
    --customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer >/dev/null 2>&1 || true' \
    "$SUITE" "$WORK/rootfs.tar" "$MIRROR"
else
  debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$WORK/rootfs" "$MIRROR"
  cp "$WORK"/ca/*.crt "$WORK/rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$WORK/rootfs" update-ca-certificates >/dev/null
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$WORK/rootfs/etc/pip.conf"
  rm -f "$WORK/rootfs/etc/hostname"; : > "$WORK/rootfs/etc/machine-id"
  chroot "$WORK/rootfs" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer >/dev/null 2>&1 || true
  rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
  tar -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" .
fi
podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
  "$WORK/rootfs.tar" "$IMAGE" >/dev/null
podman image prune -f >/dev/null   # drop the previous (now dangling) build
podman image ls "$IMAGE"
