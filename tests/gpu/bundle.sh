#!/bin/bash
# tests/gpu/bundle.sh DEST [O=dir]: a self-contained copy of what tests/gpu/device-check.sh runs,
# for a GPU node that has the NVIDIA driver but none of the build dependencies (no compiler,
# no -dev packages). DEST gets the same layout as the build tree (corrald, corralctl,
# corral-spawn, the GPU helpers, tests/unit/test_gpu and its stand-in libraries) plus DEST/lib:
# every shared library those programs load, except the C library's own (libc, libm, libdl,
# libpthread, librt, libresolv, the dynamic loader), which the node's newer glibc provides.
# On the node: tests/gpu/device-check.sh O=DEST --prebuilt   (run from a checkout of the same
# commit; it puts DEST/lib on LD_LIBRARY_PATH for these programs only).
set -eu
cd "$(dirname "$0")/../.."
DEST=${1:?usage: tests/gpu/bundle.sh DEST [O=dir]}
O=.output
for a in "${@:2}"; do case $a in O=*) O=${a#O=} ;; esac; done
progs=(corrald corralctl corral-spawn tests/integration/helper_gpucheck
	tests/integration/helper_cudaapp tests/unit/test_gpu)
make O="$O" -j"$(nproc)" "${progs[@]/#/$O/}" "$O/tests/gpu/libnvidia-ml.so.1" \
	"$O/tests/gpu/libcuda.so.1" >/dev/null
rm -rf "$DEST"
mkdir -p "$DEST/lib" "$DEST/tests/integration" "$DEST/tests/unit" "$DEST/tests/gpu"
for p in "${progs[@]}"; do cp "$O/$p" "$DEST/$p"; done
cp "$O/tests/gpu/libnvidia-ml.so.1" "$O/tests/gpu/libcuda.so.1" "$DEST/tests/gpu/"
for p in "${progs[@]}"; do
	# static programs print "not a dynamic executable" and exit 1: nothing to copy
	ldd "$O/$p" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' || true
done | sort -u | while read -r lib; do
	case ${lib##*/} in
	libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libresolv.so.* | ld-linux*) ;;
	*) cp -L "$lib" "$DEST/lib/" ;;
	esac
done
echo "bundle in $DEST: $(find "$DEST" -type f | wc -l) files, $(du -sh "$DEST" | cut -f1)"
