#!/bin/bash
# Audit trail events (root, real BPF, a unified-hierarchy cgroup of its own), bpf/audit.c:
#   events allow  sh -c 'ls; python3 connect 127.0.0.1:PORT' with a listener on PORT:
#                 exactly the exec events sh, ls, python3 and one connect event (allow)
#   events deny   the same with the rule deny 127.0.0.1:PORT: connect fails with EPERM in the
#                 task and a deny event is emitted
#   storm         20,000 fork+exec inside one task: events received + drops counted == execs
#                 performed, exactly; once consumed while running, once with a 64 KiB ring
#                 buffer read only at the end (forces drops: the count must still be exact)
# Each in both attach modes (tp_btf preferred, raw_tp forced); without --raw, a kernel with BTF
# must have loaded tp_btf (a refused tp_btf program is not hidden by the fallback).
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
H=$O/tests/integration/helper_audit
X=$O/tests/integration/audit_exit0
for b in "$H" "$X"; do
	[ -x "$b" ] || { echo "missing $b (build with make O=$O all)"; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -d /sys/fs/cgroup/unified ] ||
	{ echo "SKIP: no /sys/fs/cgroup/unified (the helper uses the hybrid layout)"; exit 77; }
command -v python3 >/dev/null || { echo "missing python3 (test dependency)"; exit 1; }

fail=0 pass=0
# Where the kernel has BTF, the preferred mode must be the one loaded: a tp_btf program the
# verifier refuses would otherwise fall back to raw_tp silently and every check still pass.
want_btf=0
[ -r /sys/kernel/btf/vmlinux ] && want_btf=1
run() {
	local out rc
	echo "--- $*"
	out=$(timeout 300 "$H" "$@" 2>&1)
	rc=$?
	echo "$out"
	if [ "$rc" = 0 ] && [ "$1" != --raw ] && [ "$want_btf" = 1 ] &&
		! grep -qx 'attach mode: tp_btf' <<<"$out"; then
		echo "tp_btf expected (the kernel has BTF), got: $(grep 'attach mode' <<<"$out")"
		rc=1
	fi
	case $rc in
	0) pass=$((pass+1)) ;;
	77) exit 77 ;;
	*) fail=$((fail+1)); echo "FAILED: $*" ;;
	esac
}
for mode in "" --raw; do
	run $mode events allow
	run $mode events deny
	run $mode --target "$X" storm 20000
	run $mode --target "$X" --ringbuf 65536 --no-consume storm 20000
done
echo "audit events: $pass passed, $fail failed"
[ "$fail" = 0 ]
