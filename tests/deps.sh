#!/bin/sh
# Installs the Debian 12 packages a target needs (as root):
#   tests/deps.sh build   the programs (make programs)
#   tests/deps.sh demo    build + what make demo runs (python3, sqlite3, curl)
#   tests/deps.sh test    demo + everything make check runs (unit, fuzz, integration, VM,
#                         benchmarks, metrics and man page checks)   [the default]
# make demo installs "demo" only; make deps and .ci/run install "test".
set -eu
BUILD="build-essential pkg-config clang clang-16 llvm bpftool libbpf-dev libelf-dev zlib1g-dev
 libseccomp-dev libcgroup-dev libjansson-dev libyajl-dev libinih-dev libsystemd-dev
 libcurl4-openssl-dev libmicrohttpd-dev libgnutls28-dev libzstd-dev libsqlite3-dev libpq-dev libnl-3-dev libnl-genl-3-dev
 libssl-dev"
DEMO="python3 sqlite3 curl procps"
TEST="libcmocka-dev postgresql bubblewrap linux-perf bc valgrind qemu-system-x86 mmdebstrap
 e2fsprogs chromium iproute2 clang-format openssl haproxy prometheus mandoc zstd
 slurmctld slurmd slurmdbd slurm-client munge mariadb-server strace python3-cryptography"
case "${1:-test}" in
build) PKGS=$BUILD ;;
demo) PKGS="$BUILD $DEMO" ;;
test) PKGS="$BUILD $DEMO $TEST" ;;
*)
	echo "usage: tests/deps.sh [build|demo|test]" >&2
	exit 2
	;;
esac
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -z "$missing" ]; then
	echo "deps (${1:-test}): all packages present"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps (${1:-test}): missing packages:$missing (run as root to install them)" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
