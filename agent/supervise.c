/* SPDX-License-Identifier: MIT */
/* Supervision of a task's limits and of its end: pure decisions (agent/supervise.h). */
#include "agent/supervise.h"
#include "agent/agent.h"

#include <signal.h>
#include <sys/wait.h>

static void lower(uint64_t *due, uint64_t when)
{
	if (when < *due)
		*due = when;
}

bool sv_fire(struct task *t, enum acct_exit_status why, uint64_t now, uint64_t limit,
	     uint64_t observed, struct sv_verdict *v)
{
	if (t->limit_reason != ACCT_EXIT_NONE)
		return false;
	t->limit_reason = why;
	t->term_sent_mono = now;
	t->limit_value = limit;
	t->limit_observed = observed;
	*v = (struct sv_verdict){
	    .why = why, .signal = SIGTERM, .limit = limit, .observed = observed};
	return true;
}

bool sv_time_limit(struct task *t, uint64_t now, struct sv_verdict *v, uint64_t *due)
{
	uint64_t lim = t->spec.time_limit_ns;

	if (!lim || t->limit_reason != ACCT_EXIT_NONE)
		return false;
	if (now - t->start_mono_ns >= lim)
		return sv_fire(t, ACCT_EXIT_TIME_LIMIT, now, lim, now - t->start_mono_ns, v);
	lower(due, t->start_mono_ns + lim);
	return false;
}

bool sv_kill_grace(struct task *t, uint64_t now, uint64_t kill_grace_ns, uint64_t *due)
{
	if (t->limit_reason == ACCT_EXIT_NONE || t->kill_sent)
		return false;
	if (now - t->term_sent_mono >= kill_grace_ns) {
		t->kill_sent = true;
		return true;
	}
	lower(due, t->term_sent_mono + kill_grace_ns);
	return false;
}

bool sv_cpu_time(struct task *t, unsigned ncpus, uint64_t usage, uint64_t now, struct sv_verdict *v,
		 uint64_t *delay_ns)
{
	uint64_t lim = t->spec.cpu_time_limit_ns, delay;
	double p;

	*delay_ns = 0;
	if (!lim || t->limit_reason != ACCT_EXIT_NONE)
		return false;
	if (usage >= lim)
		return sv_fire(t, ACCT_EXIT_CPU_TIME_LIMIT, now, lim, usage, v);
	p = ncpus > 0 ? (double)ncpus : 1.0;
	if (t->spec.cpus > 0 && t->spec.cpus < p)
		p = t->spec.cpus;
	delay = (uint64_t)((double)(lim - usage) / p);
	if (usage == t->cpu_check_last_usage) {
		t->cpu_check_idle_ns =
		    t->cpu_check_idle_ns ? t->cpu_check_idle_ns * 2 : SV_CPU_CHECK_MIN_NS;
		if (t->cpu_check_idle_ns > SV_CPU_CHECK_MAX_NS)
			t->cpu_check_idle_ns = SV_CPU_CHECK_MAX_NS;
		if (delay < t->cpu_check_idle_ns)
			delay = t->cpu_check_idle_ns;
	} else {
		t->cpu_check_idle_ns = 0;
	}
	t->cpu_check_last_usage = usage;
	*delay_ns = delay < SV_CPU_CHECK_MIN_NS ? SV_CPU_CHECK_MIN_NS : delay;
	return false;
}

bool sv_meter_limit(struct task *t, enum acct_exit_status why, uint64_t now, uint64_t limit,
		    uint64_t observed, struct sv_verdict *v)
{
	if (why == ACCT_EXIT_NONE || !sv_fire(t, why, now, limit, observed, v))
		return false;
	v->signal = SIGKILL;
	t->kill_sent = true;
	return true;
}

uint64_t sv_oom_new_kills(struct task *t, uint64_t total)
{
	uint64_t n;

	if (total > t->oom_kills)
		t->oom_kills = total;
	if (t->oom_kills <= t->oom_kills_reported)
		return 0;
	n = t->oom_kills - t->oom_kills_reported;
	t->oom_kills_reported = t->oom_kills;
	return n;
}

void sv_decide_status(struct task *t, uint64_t oom_kills)
{
	int ws = t->exit.wait_status;

	if (t->status == ACCT_EXIT_LAUNCH_FAILED || t->status == ACCT_EXIT_LOST)
		return;
	t->exit_code = 0;
	t->exit_signal = 0;
	if (WIFEXITED(ws))
		t->exit_code = WEXITSTATUS(ws);
	else if (WIFSIGNALED(ws))
		t->exit_signal = WTERMSIG(ws);
	if (t->limit_reason != ACCT_EXIT_NONE)
		t->status = t->limit_reason;
	else if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGSYS)
		t->status = ACCT_EXIT_SECCOMP_KILLED;
	else if (oom_kills > 0 && ((WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) ||
				   (WIFEXITED(ws) && WEXITSTATUS(ws) != 0)))
		t->status = ACCT_EXIT_OOM_KILLED;
	else if (WIFSIGNALED(ws))
		t->status = ACCT_EXIT_SIGNALED;
	else
		t->status = ACCT_EXIT_EXITED;
}
