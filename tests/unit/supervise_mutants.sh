#!/bin/sh
# Can test_supervise fail? Each line below breaks agent/supervise.c in one place (a boundary, a
# signal, the back-off, the OOM count, the exit status's order); the test must fail on every
# one. Restores the file and rebuilds the test at the end. Run from the repository root:
#   tests/unit/supervise_mutants.sh
set -u
src=agent/supervise.c
bin=.output/tests/unit/test_supervise
orig=$(mktemp)
cp "$src" "$orig"
trap 'cp "$orig" "$src"; rm -f "$orig"; make -s "$bin" >/dev/null' EXIT
survived=0 n=0 caught=0
while IFS= read -r m; do
	[ -n "$m" ] || continue
	cp "$orig" "$src"
	sed -i "$m" "$src"
	if cmp -s "$src" "$orig"; then
		echo "NOT APPLIED: $m"
		survived=$((survived + 1))
		continue
	fi
	n=$((n + 1))
	if ! make -s "$bin" >/dev/null 2>&1; then
		echo "does not build: $m"
		survived=$((survived + 1))
	elif "$bin" >/dev/null 2>&1; then
		echo "SURVIVED: $m"
		survived=$((survived + 1))
	else
		echo "caught: $m"
		caught=$((caught + 1))
	fi
done <<'LIST'
s/if (now - t->start_mono_ns >= lim)/if (now - t->start_mono_ns > lim)/
s/if (now - t->term_sent_mono >= kill_grace_ns) {/if (now - t->term_sent_mono > kill_grace_ns) {/
s/\t\tt->kill_sent = true;//
s/\.signal = SIGTERM/.signal = SIGKILL/
s/if (t->spec.cpus > 0 && t->spec.cpus < p)/if (t->spec.cpus > 0)/
s/t->cpu_check_idle_ns \* 2/t->cpu_check_idle_ns * 3/
s/\*delay_ns = delay < SV_CPU_CHECK_MIN_NS ? SV_CPU_CHECK_MIN_NS : delay;/*delay_ns = delay;/
s/t->oom_kills_reported = t->oom_kills;//
s/else if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGSYS)/else if (0)/
s/(WIFEXITED(ws) && WEXITSTATUS(ws) != 0)/(WIFEXITED(ws))/
s/if (t->limit_reason != ACCT_EXIT_NONE)$/if (0)/
s/if (why == ACCT_EXIT_NONE || !sv_fire/if (!sv_fire/
s/^\tv->signal = SIGKILL;$//
s/^\tt->kill_sent = true;$//
s/if (why == ACCT_EXIT_NONE || !sv_fire(t, why, now, limit, observed, v))/if (why == ACCT_EXIT_NONE)/
LIST
echo "$n mutants, $caught caught, $survived not caught"
[ "$survived" -eq 0 ]
