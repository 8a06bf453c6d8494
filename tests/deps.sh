#!/bin/sh
# Installs every Debian 12 package the build, the tests and the demo need (as root).
set -eu
PKGS="build-essential pkg-config clang clang-16 llvm bpftool libbpf-dev libelf-dev zlib1g-dev
 libseccomp-dev libcgroup-dev libjansson-dev libyajl-dev libinih-dev libsystemd-dev libcmocka-dev
 libcurl4-openssl-dev libmicrohttpd-dev libgnutls28-dev openssl libsqlite3-dev sqlite3 libpq-dev postgresql haproxy
 libnl-3-dev libnl-genl-3-dev libssl-dev bubblewrap python3 linux-perf bc
 qemu-system-x86 mmdebstrap e2fsprogs chromium curl procps iproute2 clang-format"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps: all packages present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing (run as root to install them)" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
