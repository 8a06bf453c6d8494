#!/bin/sh
# SPDX-License-Identifier: MIT
# systemd/install.sh DESTDIR PREFIX O   (called by `make install`)
#
# Installs Corral below DESTDIR (may be empty) for the prefix PREFIX (e.g. /usr, /usr/local):
#   PREFIX/sbin/corrald, PREFIX/sbin/corral-collector, PREFIX/bin/corralctl,
#   PREFIX/lib/corral/corral-spawn (the launch spawner; corrald finds it as ../lib/corral)
#   units      /lib/systemd/system (PREFIX=/usr) or PREFIX/lib/systemd/system
#   tmpfiles   <unitprefix>/lib/tmpfiles.d/corral.conf, sysusers <..>/lib/sysusers.d/corral.conf
#   config     /etc/corral/corrald.conf, /etc/corral/collector.conf (never overwritten; a newer
#              sample is put beside an existing file as *.conf.dist)
#   seccomp    PREFIX/share/corral/seccomp/*.json (+ /etc/corral/seccomp for site profiles)
#   man        PREFIX/share/man/man1/corralctl.1, man8/corrald.8, man8/corral-collector.8
# Units and config always name /usr/sbin and /usr/bin; for another PREFIX the unit files get
# their ExecStart paths rewritten. Nothing is enabled or started (that is the package's or the
# operator's call: systemctl enable --now corrald).
set -eu

if [ $# -ne 3 ]; then
	echo "usage: $0 DESTDIR PREFIX O" >&2
	exit 2
fi
destdir=$1
prefix=${2%/}
out=$3
[ -n "$prefix" ] || prefix=/usr
src=$(cd "$(dirname "$0")/.." && pwd)

case $prefix in
/usr) sysd=/lib/systemd/system; libd=/usr/lib ;;
*) sysd=$prefix/lib/systemd/system; libd=$prefix/lib ;;
esac
# /etc stays /etc for /usr and /usr/local; other prefixes (e.g. /opt/corral) keep their own.
case $prefix in
/usr | /usr/local) etc=/etc ;;
*) etc=$prefix/etc ;;
esac

d() { install -d -m "${2:-0755}" "$destdir$1"; }
say() { printf '  %-8s %s\n' INSTALL "$1"; }

for b in corrald corralctl corral-collector corral-spawn; do
	[ -x "$out/$b" ] || { echo "install: $out/$b missing (run make first)" >&2; exit 1; }
done

d "$prefix/sbin"; d "$prefix/bin"
install -m 0755 "$out/corrald" "$destdir$prefix/sbin/corrald"
install -m 0755 "$out/corral-collector" "$destdir$prefix/sbin/corral-collector"
install -m 0755 "$out/corralctl" "$destdir$prefix/bin/corralctl"
say "$prefix/sbin/corrald $prefix/sbin/corral-collector $prefix/bin/corralctl"
d "$prefix/lib/corral"
install -m 0755 "$out/corral-spawn" "$destdir$prefix/lib/corral/corral-spawn"
say "$prefix/lib/corral/corral-spawn"

# Units: rewrite binary and config paths for a non-/usr prefix.
d "$sysd"
for u in corrald.service corral-collector.service; do
	sed -e "s|/usr/sbin/|$prefix/sbin/|g" -e "s|/usr/bin/|$prefix/bin/|g" \
		-e "s|/etc/corral/|$etc/corral/|g" "$src/systemd/$u" >"$destdir$sysd/$u.tmp"
	chmod 0644 "$destdir$sysd/$u.tmp"
	mv "$destdir$sysd/$u.tmp" "$destdir$sysd/$u"
done
say "$sysd/corrald.service $sysd/corral-collector.service"

d "$libd/tmpfiles.d"; d "$libd/sysusers.d"
install -m 0644 "$src/systemd/corral.tmpfiles" "$destdir$libd/tmpfiles.d/corral.conf"
install -m 0644 "$src/systemd/corral.sysusers" "$destdir$libd/sysusers.d/corral.conf"
say "$libd/tmpfiles.d/corral.conf $libd/sysusers.d/corral.conf"

# Config: keep what the operator has; ship the new sample beside it.
d "$etc/corral"; d "$etc/corral/seccomp"
for c in corrald.conf collector.conf; do
	if [ -e "$destdir$etc/corral/$c" ]; then
		if ! cmp -s "$src/systemd/$c" "$destdir$etc/corral/$c"; then
			install -m 0644 "$src/systemd/$c" "$destdir$etc/corral/$c.dist"
			say "$etc/corral/$c.dist (kept existing $c)"
		fi
	else
		install -m 0644 "$src/systemd/$c" "$destdir$etc/corral/$c"
		say "$etc/corral/$c"
	fi
done

d "$prefix/share/corral/seccomp"
n=0
for p in "$src"/isolation/profiles/*.json; do
	[ -e "$p" ] || continue
	install -m 0644 "$p" "$destdir$prefix/share/corral/seccomp/"
	n=$((n + 1))
done
# The agent looks profiles up in /etc/corral/seccomp (seccomp_dir): link the shipped ones
# there unless the site already has a file of that name.
for p in "$destdir$prefix"/share/corral/seccomp/*.json; do
	[ -e "$p" ] || continue
	b=$(basename "$p")
	[ -e "$destdir$etc/corral/seccomp/$b" ] || [ -L "$destdir$etc/corral/seccomp/$b" ] ||
		ln -s "$prefix/share/corral/seccomp/$b" "$destdir$etc/corral/seccomp/$b"
done
say "$prefix/share/corral/seccomp ($n profiles, linked from $etc/corral/seccomp)"

d "$prefix/share/man/man1"; d "$prefix/share/man/man8"
install -m 0644 "$src/docs/man/corralctl.1" "$destdir$prefix/share/man/man1/corralctl.1"
install -m 0644 "$src/docs/man/corrald.8" "$destdir$prefix/share/man/man8/corrald.8"
install -m 0644 "$src/docs/man/corral-collector.8" "$destdir$prefix/share/man/man8/corral-collector.8"
say "$prefix/share/man/man1/corralctl.1 man8/corrald.8 man8/corral-collector.8"
