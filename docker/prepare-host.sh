#!/usr/bin/env bash
# Prepares a Debian host without a Docker engine to run docker/docker-compose.yml with rootful podman.
# Idempotent: every step checks before acting, so a prepared host costs a second.
# Needs root and apt-get; stops with a clear message otherwise rather than half-preparing the host.
set -euo pipefail

LOCALBASE=${CHRONOLOG_LOCALBASE:-localhost/localbase}
PACKAGES=(podman crun conmon netavark aardvark-dns catatonit iptables uidmap debootstrap docker-compose)

say() { echo "[prepare-host] $*"; }
die() { echo "[prepare-host] ERROR: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "preparing the host (apt packages, a cgroup mount, /etc/containers) needs root.
  Run 'sudo make compose-test', or with a working Docker engine follow docs/docker.md
  ('docker compose -f docker/docker-compose.yml up --build')."
command -v apt-get >/dev/null || die "apt-get not found: this preparation is for Debian hosts only."

# 1. Packages: install only what is missing, so a prepared host does not touch apt at all.
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages already installed"
fi

# 2. crun refuses cgroup "hybrid" mode while a controller is enabled on cgroup2: give each such
#    controller a cgroup v1 hierarchy instead.
if [ -r /sys/fs/cgroup/unified/cgroup.controllers ]; then
  for c in $(cat /sys/fs/cgroup/unified/cgroup.controllers); do
    if mountpoint -q "/sys/fs/cgroup/$c"; then
      say "cgroup v1 $c already mounted"
    else
      say "mounting cgroup controller $c as cgroup v1 (crun rejects hybrid mode)"
      mkdir -p "/sys/fs/cgroup/$c"
      mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c" \
        || die "could not mount cgroup controller $c on /sys/fs/cgroup/$c"
    fi
  done
fi

# 3. podman asks for rlimits above this host's hard limits, which even root cannot raise here:
#    default the containers' limits to the host's hard limits.
nofile=$(ulimit -Hn)
nproc=$(cat /proc/sys/kernel/pid_max)
hard_nproc=$(ulimit -Hu)
if [ "$hard_nproc" != unlimited ] && [ "$hard_nproc" -lt "$nproc" ]; then nproc=$hard_nproc; fi
[ "$nofile" = unlimited ] && nofile=1048576
conf=/etc/containers/containers.conf
# ensure_setting SECTION KEY VALUE: set KEY = VALUE in [SECTION] of $conf unless already so.
ensure_setting() {
  local section=$1 key=$2 line="$2 = $3"
  if [ -f "$conf" ] && grep -qxF "$line" "$conf"; then
    say "$key already set in $conf"
  elif [ -f "$conf" ] && grep -q "^[[:space:]]*$key[[:space:]]*=" "$conf"; then
    die "$conf sets $key to something else; set it to: $line"
  else
    say "setting $key in [$section] of $conf"
    mkdir -p "$(dirname "$conf")"
    if [ -f "$conf" ] && grep -qx "\[$section\]" "$conf"; then
      sed -i "/^\[$section\]\$/a $line" "$conf"
    else
      printf '[%s]\n%s\n' "$section" "$line" >>"$conf"
    fi
  fi
}
ensure_setting containers default_ulimits "[\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
# netavark + aardvark-dns resolve service names between containers; never fall back to CNI.
ensure_setting network network_backend '"netavark"'

# 4. No registry is reachable, so images build FROM a Debian base made here with debootstrap. It
#    carries the host's extra CA certificates, as the host's TLS egress may depend on them.
if podman image exists "$LOCALBASE"; then
  say "base image $LOCALBASE already exists"
else
  mirror=$(grep -rhoE '^(URIs:|deb)[[:space:]]+https?://[^[:space:]]+/debian/?([[:space:]]|$)' \
             /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
           | awk '{print $2}' | head -n1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  rootfs=$(mktemp -d /var/tmp/chronolog-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  say "building base image $LOCALBASE with debootstrap ($suite from $mirror, ~30 s)"
  debootstrap --variant=minbase --include=ca-certificates "$suite" "$rootfs" "$mirror" >/dev/null \
    || die "debootstrap of $suite from $mirror failed (see /var/tmp/chronolog-rootfs.*/debootstrap/debootstrap.log)"
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman import -q - "$LOCALBASE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  say "base image $LOCALBASE imported"
fi
say "host ready"
