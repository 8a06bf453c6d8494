#!/bin/bash
# Network policy, local destinations (root, real BPF, a unified-hierarchy cgroup of its own),
# through tests/integration/helper_netpolicy: every form of "this node" (0.0.0.0, ::,
# ::ffff:0.0.0.0, 127.0.0.1, ::1, ::ffff:127.0.0.1, the node's IPv4 address also v4-mapped, its
# IPv6 address) over TCP connect, TCP fast open, UDP sendto and UDP connect, against dual-stack
# listeners that count what arrives (the independent truth):
#   no rules            every probe reaches the listener; the audit names the address reached
#                       (0.0.0.0 -> 127.0.0.1, :: -> ::1, a wildcard from a socket bound to
#                       the node's address -> that address)
#   deny 127.0.0.0/8    every probe fails with EPERM and nothing arrives (the node is one
#   deny <node addr>    destination: denying any of its addresses denies them all)
#   deny ::1/128
#   default deny        loopback forms allowed, the node's external addresses denied
#   address added       a /32 added to lo while the policy is loaded is known through
#                       rtnetlink and denied with the rest of the node
set -u
cd "$(dirname "$0")/../.."
O=${CORRAL_O:-.output}
H=$O/tests/integration/helper_netpolicy
[ -x "$H" ] || { echo "missing $H (build with make O=$O all)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -d /sys/fs/cgroup/unified ] || [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] ||
	{ echo "SKIP: no unified hierarchy"; exit 77; }
fails=0
pass() { printf '  ok    %s\n' "$1"; }
bad() { printf '  FAIL  %s\n' "$1"; fails=$((fails + 1)); }
work=$(mktemp -d /tmp/corral-netpolicy.XXXXXX)
trap 'rm -rf "$work"' EXIT

run() { # NAME ARGS...: helper output in $work/NAME
	local name=$1
	shift
	timeout 120 "$H" "$@" >"$work/$name" 2>&1
	case $? in
	0) ;;
	77) cat "$work/$name"; exit 77 ;;
	*) bad "$name: helper failed"; sed 's/^/        /' "$work/$name"; return 1 ;;
	esac
	grep -q '^probe ' "$work/$name" || { bad "$name: no probes"; return 1; }
}

# every probe line of NAME satisfies the awk condition COND (fields: $2 kind, $3 target,
# errno/reached/audit/verdict/events follow by name)
all() { # NAME DESC COND
	local bad_lines
	bad_lines=$(awk '/^probe /{ for (i = 3; i < NF; i++) v[$i] = $(i + 1);
		err = v["errno"]; got = v["reached"]; addr = v["audit"]; verdict = $(NF - 2);
		if (!('"$3"')) print }' "$work/$1")
	if [ -z "$bad_lines" ]; then
		pass "$1: $2 ($(grep -c '^probe ' "$work/$1") probes)"
	else
		bad "$1: $2"
		printf '%s\n' "$bad_lines" | sed 's/^/        /'
	fi
}
audit_of() { # NAME "kind target[ bound X]": the audited address
	grep "^probe $2 errno" "$work/$1" | awk '{ for (i = 3; i < NF; i++) if ($i == "audit") print $(i + 1) }'
}

run open
own4=$(awk '/^node address v4/ {print $4}' "$work/open")
[ "$own4" != - ] || { echo "SKIP: the node has no non-loopback IPv4 address"; exit 77; }
all open "every form reaches the listener, allowed" 'err == 0 && got == 1 && verdict == "allow"'
for f in "tcp 0.0.0.0=127.0.0.1" "tcp ::=::1" "tcp ::ffff:0.0.0.0=::ffff:127.0.0.1" \
	"udp 0.0.0.0=127.0.0.1" "udp ::=::1" "tfo 0.0.0.0=127.0.0.1" \
	"udpc ::ffff:0.0.0.0=::ffff:127.0.0.1" "tcp 0.0.0.0 bound $own4=$own4" \
	"udp 0.0.0.0 bound $own4=$own4"; do
	got=$(audit_of open "${f%%=*}")
	[ "$got" = "${f#*=}" ] && pass "audit of ${f%%=*}: the address reached, ${f#*=}" ||
		bad "audit of ${f%%=*}: '$got', want ${f#*=}"
done

run deny_lo deny:127.0.0.0/8
all deny_lo "deny 127.0.0.0/8: every form EPERM, nothing arrives" \
	'err == 1 && got == 0 && verdict == "deny"'
run deny_own deny:OWN4
all deny_own "deny $own4/32: every form EPERM, nothing arrives" \
	'err == 1 && got == 0 && verdict == "deny"'
run deny_lo6 deny:::1/128
all deny_lo6 "deny ::1/128: every form EPERM, nothing arrives" \
	'err == 1 && got == 0 && verdict == "deny"'
run deny_port_other deny:127.0.0.0/8:1
all deny_port_other "deny 127.0.0.0/8 port 1 only: other ports allowed" \
	'err == 0 && got == 1 && verdict == "allow"'

run default_deny default:deny
all default_deny "default deny: loopback forms allowed, the node's external addresses denied" \
	'(($3 ~ /^(0\.0\.0\.0|::|::ffff:0\.0\.0\.0|127\.0\.0\.1|::1|::ffff:127\.0\.0\.1)$/ && $4 != "bound") ? (err == 0 && got == 1) : (err == 1 && got == 0))'

# An address the node gains while the policy is loaded (198.51.100.0/24 is TEST-NET-2).
extra=198.51.100.$((RANDOM % 200 + 20))
if ip -br addr | grep -q "$extra/"; then
	bad "$extra already on this node"
else
	run added --add-addr "$extra" deny:127.0.0.0/8
	n0=$(awk '/^node addresses known/ {print $NF}' "$work/added")
	n1=$(awk '/^node addresses after adding/ {print $NF}' "$work/added")
	[ -n "$n0" ] && [ "$n1" = $((n0 + 1)) ] &&
		pass "rtnetlink: $extra known to the policy ($n0 -> $n1 addresses)" ||
		bad "address $extra not picked up: $n0 -> $n1"
	all added "deny 127.0.0.0/8 also denies the new address $extra" \
		'err == 1 && got == 0 && verdict == "deny"'
	grep -q "^probe tcp $extra errno 1" "$work/added" && pass "tcp to $extra probed" ||
		bad "no probe of $extra"
	ip -br addr | grep -q "$extra/" && { bad "$extra left on lo"; ip addr del "$extra/32" dev lo; }
fi

[ "$fails" = 0 ] && { echo "PASS: network policy, local destinations"; exit 0; }
echo "FAIL: $fails check(s)"
exit 1
