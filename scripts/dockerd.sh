#!/usr/bin/env bash
# A private dockerd and the offline base image for polar-jobs' docker runtime (CI and tests).
#
#   scripts/dockerd.sh install   apt-get install docker.io + busybox-static when missing (CI, root)
#   scripts/dockerd.sh build     build the slim rootfs tarball into the cache (no daemon needed); prints its path
#   scripts/dockerd.sh start     start the private dockerd unless it already answers; prints `export DOCKER_HOST=...`
#   scripts/dockerd.sh image     build (or reuse) the tarball and `docker import` it unless the daemon has it
#   scripts/dockerd.sh stop      remove every container, kill dockerd, unmount and remove $POLAR_DOCKERD_DIR
#   scripts/dockerd.sh prepare   install + build: what .ci/run calls before `make test`
#
# Every command is idempotent. No registry is reachable, so the image is a rootfs built from this
# machine's binaries: busybox (static) for the userland, bash, node and the libraries they link, and
# imported as $POLAR_DOCKER_IMAGE (default localhost/polar-jobs/base:slim). The tarball is cached as
# ~/.cache/polar-jobs/images/base-<hash>.tar, the hash covering this script and every file copied in,
# so a new node or bash rebuilds it. The daemon is private: its socket, data and exec roots all live
# under $POLAR_DOCKERD_DIR (default /tmp/polar-dockerd), no iptables, no bridge (containers get only
# `lo`, or the host's network with network_mode=host).
set -euo pipefail

RT="${POLAR_DOCKERD_DIR:-/tmp/polar-dockerd}"
IMAGE="${POLAR_DOCKER_IMAGE:-localhost/polar-jobs/base:slim}"
CACHE="${POLAR_IMAGE_CACHE:-$HOME/.cache/polar-jobs/images}"
SOCK="$RT/docker.sock"
SELF="$(readlink -f "$0")"

log() { echo "[dockerd.sh] $*" >&2; }

ping_ok() { curl -sf --max-time 2 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1; }

api() {  # api METHOD PATH [curl args...]: the daemon's HTTP API through the socket
  local method=$1 path=$2; shift 2
  curl -sf --unix-socket "$SOCK" -X "$method" "http://d/v1.41$path" "$@"
}

cmd_install() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  [ -x /bin/busybox ] || missing+=(busybox-static)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  if [ ${#missing[@]} -eq 0 ]; then log "docker.io and busybox are installed"; return 0; fi
  if ! command -v apt-get >/dev/null 2>&1; then log "cannot install ${missing[*]}: no apt-get"; return 1; fi
  log "apt-get install ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The files the rootfs takes from this machine: binaries and every library they link.
rootfs_inputs() {
  local node bash
  node="$(command -v node)"; bash="$(readlink -f /bin/bash)"
  printf '%s\n' /bin/busybox "$node" "$bash"
  ldd "$node" "$bash" 2>/dev/null | awk '/=>/ {print $3} /^\s*\/lib/ {print $1}' | sort -u
  # libraries agent CLIs (bun-built claude, codex helpers) load besides those
  for lib in /lib/x86_64-linux-gnu/librt.so.1 /lib/x86_64-linux-gnu/libresolv.so.2 \
             /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/x86_64-linux-gnu/libnss_dns.so.2; do
    [ -e "$lib" ] && echo "$lib"
  done
  return 0
}

image_hash() {
  { sha256sum "$SELF"; rootfs_inputs | sort -u | xargs -r readlink -f | xargs -r sha256sum; } | sha256sum | cut -c1-16
}

tarball() { echo "$CACHE/base-$(image_hash).tar"; }

cmd_build() {
  command -v node >/dev/null 2>&1 || { log "node is not installed: the image needs it"; return 1; }
  [ -x /bin/busybox ] || { log "busybox is not installed (scripts/dockerd.sh install)"; return 1; }
  local tar; tar="$(tarball)"
  if [ -s "$tar" ]; then log "cached: $tar"; echo "$tar"; return 0; fi
  mkdir -p "$CACHE"
  local work; work="$(mktemp -d "$CACHE/.build-XXXXXX")"
  trap 'rm -rf "$work"' RETURN
  local root="$work/rootfs"
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,lib64,lib/x86_64-linux-gnu,tmp,root,home/agent,workspace,run,var/tmp}
  chmod 1777 "$root/tmp" "$root/var/tmp"
  cp /bin/busybox "$root/bin/busybox"
  for applet in $(/bin/busybox --list-full); do
    [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
  done
  cp "$(readlink -f /bin/bash)" "$root/bin/bash"
  cp "$(readlink -f "$(command -v node)")" "$root/usr/local/bin/node"
  local lib
  for lib in $(rootfs_inputs | grep -E '\.so'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/bash
agent:x:1000:1000:agent:/home/agent:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
agent:x:1000:
nogroup:x:65534:
EOF
  echo "hosts: files dns" >"$root/etc/nsswitch.conf"
  echo "polar-jobs slim base ($(image_hash))" >"$root/etc/polar-image"
  tar -C "$root" --numeric-owner -cf "$work/rootfs.tar" .
  mv "$work/rootfs.tar" "$tar"
  log "built $tar ($(du -h "$tar" | cut -f1))"
  echo "$tar"
}

cmd_start() {
  if ping_ok; then echo "export DOCKER_HOST=unix://$SOCK"; return 0; fi
  command -v dockerd >/dev/null 2>&1 || { log "dockerd is not installed (scripts/dockerd.sh install)"; return 1; }
  mkdir -p "$RT"
  if [ -s "$RT/dockerd.pid" ] && kill -0 "$(cat "$RT/dockerd.pid")" 2>/dev/null; then
    log "dockerd $(cat "$RT/dockerd.pid") is running but does not answer; stopping it"
    cmd_stop
    mkdir -p "$RT"
  fi
  # setsid: the daemon outlives this script and is not in the caller's process group
  setsid dockerd --host "unix://$SOCK" --data-root "$RT/data" --exec-root "$RT/exec" \
    --pidfile "$RT/dockerd.pid" --iptables=false --ip6tables=false --bridge=none \
    --storage-driver=overlay2 </dev/null >"$RT/dockerd.log" 2>&1 &
  local i
  for i in $(seq 1 300); do
    if ping_ok; then echo "export DOCKER_HOST=unix://$SOCK"; return 0; fi
    sleep 0.1
  done
  log "dockerd did not answer within 30 s; its log:"; tail -20 "$RT/dockerd.log" >&2
  return 1
}

cmd_image() {
  ping_ok || { log "no dockerd at $SOCK (scripts/dockerd.sh start)"; return 1; }
  local hash; hash="$(image_hash)"
  local have
  have="$(api GET "/images/$(printf %s "$IMAGE" | sed 's|/|%2F|g')/json" 2>/dev/null \
          | grep -o '"polar_jobs.image_hash":"[0-9a-f]*"' || true)"
  if [ "$have" = "\"polar_jobs.image_hash\":\"$hash\"" ]; then log "$IMAGE is loaded ($hash)"; echo "$IMAGE"; return 0; fi
  local tar; tar="$(cmd_build)"
  local repo="${IMAGE%:*}" tag="${IMAGE##*:}" out
  # POST /images/create?fromSrc=- is `docker import`, without needing the docker CLI
  out="$(curl -sS --unix-socket "$SOCK" -X POST "http://d/v1.41/images/create" \
    --url-query fromSrc=- --url-query "repo=$repo" --url-query "tag=$tag" \
    --url-query 'changes=ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
    --url-query 'changes=WORKDIR /workspace' --url-query "changes=LABEL polar_jobs.image_hash=$hash" \
    --url-query 'changes=CMD ["/bin/sh"]' \
    -H 'Content-Type: application/x-tar' --data-binary "@$tar")"
  if printf %s "$out" | grep -q '"error'; then log "import failed: $out"; return 1; fi
  log "imported $IMAGE ($hash)"
  echo "$IMAGE"
}

cmd_stop() {
  if ping_ok; then
    local ids
    ids="$(api GET '/containers/json?all=1' | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4 || true)"
    for id in $ids; do api DELETE "/containers/$id?force=1&v=1" >/dev/null || true; done
  fi
  if [ -s "$RT/dockerd.pid" ]; then
    local pid; pid="$(cat "$RT/dockerd.pid")"
    if kill "$pid" 2>/dev/null; then
      local i
      for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  if [ -d "$RT" ]; then
    # deepest first; dockerd leaves at least an nsfs mount at $RT/exec/netns/default
    awk -v rt="$(readlink -f "$RT")" '$2 == rt || index($2, rt "/") == 1 {print $2}' /proc/self/mounts \
      | sort -r | while read -r mnt; do umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; done
    rm -rf "$RT"
  fi
}

case "${1:-}" in
  install) cmd_install ;;
  build) cmd_build ;;
  start) cmd_start ;;
  image) cmd_image ;;
  stop) cmd_stop ;;
  prepare) cmd_install && cmd_build >/dev/null ;;
  hash) image_hash ;;
  *) echo "usage: $0 install|build|start|image|stop|prepare|hash" >&2; exit 2 ;;
esac
