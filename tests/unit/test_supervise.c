/* SPDX-License-Identifier: MIT */
/*
 * Supervision of a task's limits and its end (agent/supervise.c) without root: events fed in
 * (the clock, the CPU usage read, the OOM kills counted, the supervisor's wait status), the
 * verdicts checked (which limit fired, which signal, when; the exit status and exit.by). The
 * truth is the spec's limits and the clock of the test, not the module's own figures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/agent.h"
#include "agent/supervise.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#define S  (1000 * 1000 * 1000ULL)
#define MS (1000 * 1000ULL)

static void task_init(struct task *t)
{
	memset(t, 0, sizeof(*t));
	spec_init(&t->spec);
	t->start_mono_ns = 100 * S;
}

static void time_limit_fires_at_the_limit(void **state)
{
	struct task t;
	struct sv_verdict v = {0};
	uint64_t due = UINT64_MAX;

	(void)state;
	task_init(&t);
	t.spec.time_limit_ns = 10 * S;
	assert_false(sv_time_limit(&t, 105 * S, &v, &due));
	assert_int_equal(due, 110 * S); /* the next tick needed: at the limit */
	due = UINT64_MAX;
	assert_false(sv_time_limit(&t, 110 * S - 1, &v, &due));
	assert_int_equal(t.limit_reason, ACCT_EXIT_NONE);
	assert_true(sv_time_limit(&t, 110 * S, &v, &due));
	assert_int_equal(v.why, ACCT_EXIT_TIME_LIMIT);
	assert_int_equal(v.signal, SIGTERM);
	assert_int_equal(v.limit, 10 * S);
	assert_int_equal(v.observed, 10 * S);
	assert_int_equal(t.limit_reason, ACCT_EXIT_TIME_LIMIT);
	assert_int_equal(t.term_sent_mono, 110 * S);
	assert_int_equal(t.limit_value, 10 * S);
	/* once: later ticks neither fire again nor ask for a tick */
	due = UINT64_MAX;
	assert_false(sv_time_limit(&t, 200 * S, &v, &due));
	assert_int_equal(due, UINT64_MAX);
}

static void no_limit_no_verdict(void **state)
{
	struct task t;
	struct sv_verdict v = {0};
	uint64_t due = UINT64_MAX, delay = 1;

	(void)state;
	task_init(&t);
	assert_false(sv_time_limit(&t, 1000000 * S, &v, &due));
	assert_false(sv_kill_grace(&t, 1000000 * S, 5 * S, &due));
	assert_false(sv_cpu_time(&t, 4, 1000000 * S, 1000000 * S, &v, &delay));
	assert_int_equal(due, UINT64_MAX);
	assert_int_equal(delay, 0); /* no timer armed */
	assert_int_equal(t.limit_reason, ACCT_EXIT_NONE);
}

static void kill_after_the_grace(void **state)
{
	struct task t;
	struct sv_verdict v;
	uint64_t due = UINT64_MAX;

	(void)state;
	task_init(&t);
	t.spec.time_limit_ns = 10 * S;
	assert_false(sv_kill_grace(&t, 109 * S, 5 * S, &due)); /* nothing fired yet */
	assert_true(sv_time_limit(&t, 110 * S, &v, &due));
	due = UINT64_MAX;
	assert_false(sv_kill_grace(&t, 110 * S, 5 * S, &due));
	assert_false(sv_kill_grace(&t, 115 * S - 1, 5 * S, &due));
	assert_int_equal(due, 115 * S);
	assert_false(t.kill_sent);
	assert_true(sv_kill_grace(&t, 115 * S, 5 * S, &due));
	assert_true(t.kill_sent);
	due = UINT64_MAX;
	assert_false(sv_kill_grace(&t, 120 * S, 5 * S, &due)); /* SIGKILL sent once */
	assert_int_equal(due, UINT64_MAX);
}

static void zero_grace_kills_at_once(void **state)
{
	struct task t;
	struct sv_verdict v;
	uint64_t due = UINT64_MAX;

	(void)state;
	task_init(&t);
	t.spec.time_limit_ns = 1 * S;
	assert_true(sv_time_limit(&t, 101 * S, &v, &due));
	assert_true(sv_kill_grace(&t, 101 * S, 0, &due));
}

static void first_limit_wins(void **state)
{
	struct task t;
	struct sv_verdict v = {0};
	uint64_t due = UINT64_MAX, delay;

	(void)state;
	task_init(&t);
	t.spec.time_limit_ns = 10 * S;
	t.spec.cpu_time_limit_ns = 5 * S;
	assert_true(sv_cpu_time(&t, 2, 6 * S, 103 * S, &v, &delay));
	assert_int_equal(v.why, ACCT_EXIT_CPU_TIME_LIMIT);
	assert_int_equal(v.observed, 6 * S);
	assert_int_equal(v.limit, 5 * S);
	assert_false(sv_time_limit(&t, 200 * S, &v, &due));
	assert_false(sv_fire(&t, ACCT_EXIT_GPU_MEMORY_LIMIT, 200 * S, 1, 2, &v));
	assert_int_equal(t.limit_reason, ACCT_EXIT_CPU_TIME_LIMIT);
	assert_int_equal(t.term_sent_mono, 103 * S);
}

static void cpu_check_waits_for_the_fastest_spend(void **state)
{
	struct task t;
	struct sv_verdict v;
	uint64_t delay;

	(void)state;
	task_init(&t);
	t.spec.cpu_time_limit_ns = 10 * S;
	/* 8 s left on 4 CPUs: not spent before 2 s */
	assert_false(sv_cpu_time(&t, 4, 2 * S, 100 * S, &v, &delay));
	assert_int_equal(delay, 2 * S);
	/* --cpus 0.5 caps the rate: 7 s left take 14 s at least */
	t.spec.cpus = 0.5;
	assert_false(sv_cpu_time(&t, 4, 3 * S, 101 * S, &v, &delay));
	assert_int_equal(delay, 14 * S);
	/* --cpus above the node's CPUs: the node's count */
	t.spec.cpus = 16;
	assert_false(sv_cpu_time(&t, 4, 6 * S, 102 * S, &v, &delay));
	assert_int_equal(delay, 1 * S);
	/* no CPU count known: one CPU */
	assert_false(sv_cpu_time(&t, 0, 7 * S, 103 * S, &v, &delay));
	assert_int_equal(delay, 3 * S);
	/* near the limit: never below the minimum */
	assert_false(sv_cpu_time(&t, 4, 10 * S - 1000, 104 * S, &v, &delay));
	assert_int_equal(delay, SV_CPU_CHECK_MIN_NS);
	assert_true(sv_cpu_time(&t, 4, 10 * S, 105 * S, &v, &delay));
	assert_int_equal(v.why, ACCT_EXIT_CPU_TIME_LIMIT);
	assert_int_equal(v.signal, SIGTERM);
	assert_int_equal(delay, 0);
	assert_false(sv_cpu_time(&t, 4, 11 * S, 106 * S, &v, &delay));
	assert_int_equal(delay, 0); /* fired: the timer stops */
}

static void cpu_check_backs_off_an_idle_task(void **state)
{
	struct task t;
	struct sv_verdict v;
	uint64_t delay, want = SV_CPU_CHECK_MIN_NS, usage = 10 * S - 1000;

	(void)state;
	task_init(&t);
	t.spec.cpu_time_limit_ns = 10 * S;
	assert_false(sv_cpu_time(&t, 4, usage, 100 * S, &v, &delay));
	assert_int_equal(delay, SV_CPU_CHECK_MIN_NS);
	for (int i = 0; i < 12; i++) {
		want = want * 2 > SV_CPU_CHECK_MAX_NS ? SV_CPU_CHECK_MAX_NS : want * 2;
		if (i == 0)
			want = SV_CPU_CHECK_MIN_NS; /* the first idle check: the minimum */
		assert_false(sv_cpu_time(&t, 4, usage, 100 * S + (uint64_t)i * S, &v, &delay));
		assert_int_equal(delay, want);
	}
	assert_int_equal(delay, SV_CPU_CHECK_MAX_NS);
	/* it used CPU again: polled at the minimum */
	assert_false(sv_cpu_time(&t, 4, usage + 10, 200 * S, &v, &delay));
	assert_int_equal(delay, SV_CPU_CHECK_MIN_NS);
}

/* A task that spends 3 of the node's P = 4 CPUs all the time, checked when the verdicts say:
 * the limit fires at the first check at or past it, the overshoot at most 3 x the minimum
 * interval, after a few checks (not one per millisecond). */
static void cpu_limit_fires_on_time(void **state)
{
	const unsigned P = 4, R = 3;
	struct task t;
	struct sv_verdict v;
	uint64_t now = 100 * S, usage = 0, delay;
	unsigned checks = 0;

	(void)state;
	task_init(&t);
	t.spec.cpu_time_limit_ns = 60 * S;
	while (!sv_cpu_time(&t, P, usage, now, &v, &delay)) {
		assert_true(delay >= SV_CPU_CHECK_MIN_NS);
		assert_true(usage < t.spec.cpu_time_limit_ns);
		now += delay;
		usage += delay * R;
		assert_true(++checks < 30);
	}
	assert_int_equal(v.why, ACCT_EXIT_CPU_TIME_LIMIT);
	assert_true(usage >= 60 * S);
	assert_true(usage - 60 * S <= R * SV_CPU_CHECK_MIN_NS);
	assert_int_equal(v.observed, usage);
	assert_int_equal(t.term_sent_mono, now);
	assert_true(now - 100 * S <= 20 * S + SV_CPU_CHECK_MIN_NS);
}

static void oom_kills_reported_once(void **state)
{
	struct task t;

	(void)state;
	task_init(&t);
	assert_int_equal(sv_oom_new_kills(&t, 0), 0);
	assert_int_equal(sv_oom_new_kills(&t, 2), 2);
	assert_int_equal(sv_oom_new_kills(&t, 2), 0);
	assert_int_equal(sv_oom_new_kills(&t, 3), 1);
	assert_int_equal(sv_oom_new_kills(&t, 1), 0); /* a lower read changes nothing */
	assert_int_equal(t.oom_kills, 3);
	assert_int_equal(t.oom_kills_reported, 3);
}

struct end_case {
	int ws;
	uint64_t oom_kills;
	enum acct_exit_status limit, before;
	const char *by;
	int code, sig;
};

static void exit_status_decided(void **state)
{
	static const struct end_case cases[] = {
	    {W_EXITCODE(0, 0), 0, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "exited", 0, 0},
	    {W_EXITCODE(3, 0), 0, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "exited", 3, 0},
	    {W_EXITCODE(0, SIGKILL), 0, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "signaled", 0, SIGKILL},
	    {W_EXITCODE(0, SIGKILL), 1, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "oom_killed", 0, SIGKILL},
	    {W_EXITCODE(137, 0), 2, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "oom_killed", 137, 0},
	    /* a worker OOM-killed, the task went on and ended well */
	    {W_EXITCODE(0, 0), 1, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "exited", 0, 0},
	    {W_EXITCODE(0, SIGTERM), 1, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "signaled", 0, SIGTERM},
	    {W_EXITCODE(0, SIGSYS), 0, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "seccomp_killed", 0, SIGSYS},
	    {W_EXITCODE(0, SIGSYS), 1, ACCT_EXIT_NONE, ACCT_EXIT_NONE, "seccomp_killed", 0, SIGSYS},
	    /* a fired limit names the end, whatever signal came */
	    {W_EXITCODE(0, SIGTERM), 0, ACCT_EXIT_TIME_LIMIT, ACCT_EXIT_NONE, "time_limit", 0,
	     SIGTERM},
	    {W_EXITCODE(0, SIGKILL), 3, ACCT_EXIT_CPU_TIME_LIMIT, ACCT_EXIT_NONE, "cpu_time_limit",
	     0, SIGKILL},
	    {W_EXITCODE(1, 0), 0, ACCT_EXIT_GPU_MEMORY_LIMIT, ACCT_EXIT_NONE, "gpu_memory_limit", 1,
	     0},
	    /* kept: the launch failed, or the supervisor was lost */
	    {W_EXITCODE(0, SIGKILL), 1, ACCT_EXIT_TIME_LIMIT, ACCT_EXIT_LAUNCH_FAILED,
	     "launch_failed", -1, -1},
	    {W_EXITCODE(0, 0), 0, ACCT_EXIT_NONE, ACCT_EXIT_LOST, "lost", -1, -1},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct end_case *c = &cases[i];
		struct task t;

		task_init(&t);
		t.exit.wait_status = c->ws;
		t.limit_reason = c->limit;
		t.status = c->before;
		t.exit_code = t.exit_signal = -1;
		sv_decide_status(&t, c->oom_kills);
		print_message("case %zu: %s\n", i, c->by);
		assert_string_equal(acct_exit_status_to_string(t.status), c->by);
		assert_int_equal(t.exit_code, c->code);
		assert_int_equal(t.exit_signal, c->sig);
	}
}

/* A task that ignores SIGTERM, past its wall-time limit: SIGTERM at the limit, SIGKILL one
 * grace later, exit.by time_limit with the signal that ended it. */
static void time_limit_whole_story(void **state)
{
	const uint64_t grace = 3 * S;
	struct task t;
	struct sv_verdict v;
	int sigs[4], n_sigs = 0;
	uint64_t sent_at[4];

	(void)state;
	task_init(&t);
	t.spec.time_limit_ns = 5 * S;
	for (uint64_t now = 100 * S; now <= 120 * S; now += 500 * MS) {
		uint64_t due = UINT64_MAX;

		if (sv_time_limit(&t, now, &v, &due)) {
			sent_at[n_sigs] = now;
			sigs[n_sigs++] = v.signal;
		}
		if (sv_kill_grace(&t, now, grace, &due)) {
			sent_at[n_sigs] = now;
			sigs[n_sigs++] = SIGKILL;
		}
		assert_true(n_sigs <= 2);
	}
	assert_int_equal(n_sigs, 2);
	assert_int_equal(sigs[0], SIGTERM);
	assert_int_equal(sent_at[0], 105 * S);
	assert_int_equal(sigs[1], SIGKILL);
	assert_int_equal(sent_at[1], 108 * S);
	t.exit.wait_status = W_EXITCODE(0, SIGKILL);
	sv_decide_status(&t, 0);
	assert_string_equal(acct_exit_status_to_string(t.status), "time_limit");
	assert_int_equal(t.exit_signal, SIGKILL);
}

/* A meter's limit (the GPU memory limit, from the NVML watchdog or the libcuda uprobe): SIGKILL at
 * once, no second SIGKILL after the grace, the first limit the task's, its exit status. */
static void meter_limit_kills_at_once(void **state)
{
	struct task t;
	struct sv_verdict v = {0};
	uint64_t due = UINT64_MAX;

	(void)state;
	task_init(&t);
	t.spec.time_limit_ns = 10 * S;
	assert_false(sv_meter_limit(&t, ACCT_EXIT_NONE, 101 * S, 256, 300, &v));
	assert_int_equal(t.limit_reason, ACCT_EXIT_NONE);
	assert_false(t.kill_sent);
	assert_true(
	    sv_meter_limit(&t, ACCT_EXIT_GPU_MEMORY_LIMIT, 103 * S, 256 << 20, 300 << 20, &v));
	assert_int_equal(v.why, ACCT_EXIT_GPU_MEMORY_LIMIT);
	assert_int_equal(v.signal, SIGKILL);
	assert_int_equal(v.limit, 256 << 20);
	assert_int_equal(v.observed, 300 << 20);
	assert_int_equal(t.limit_reason, ACCT_EXIT_GPU_MEMORY_LIMIT);
	assert_int_equal(t.limit_value, 256 << 20);
	assert_int_equal(t.limit_observed, 300 << 20);
	assert_int_equal(t.term_sent_mono, 103 * S);
	/* the SIGKILL is the only signal: no second one after the grace, no time limit later */
	assert_false(sv_kill_grace(&t, 200 * S, 5 * S, &due));
	assert_int_equal(due, UINT64_MAX);
	assert_false(sv_time_limit(&t, 200 * S, &v, &due));
	assert_false(sv_meter_limit(&t, ACCT_EXIT_GPU_MEMORY_LIMIT, 104 * S, 256, 900, &v));
	assert_int_equal(t.limit_observed, 300 << 20);
	/* the limit says why, though the cgroup counted an OOM kill too */
	t.exit.wait_status = W_EXITCODE(0, SIGKILL);
	sv_decide_status(&t, 1);
	assert_string_equal(acct_exit_status_to_string(t.status), "gpu_memory_limit");
	assert_int_equal(t.exit_signal, SIGKILL);
	assert_int_equal(t.exit_code, 0);
}

/* A meter's limit after the wall-time limit fired: the time limit stays the task's, its grace
 * and SIGKILL as before. */
static void meter_limit_after_another(void **state)
{
	struct task t;
	struct sv_verdict v = {0};
	uint64_t due = UINT64_MAX;

	(void)state;
	task_init(&t);
	t.spec.time_limit_ns = 10 * S;
	assert_true(sv_time_limit(&t, 110 * S, &v, &due));
	assert_false(sv_meter_limit(&t, ACCT_EXIT_GPU_MEMORY_LIMIT, 111 * S, 256, 300, &v));
	assert_int_equal(v.why, ACCT_EXIT_TIME_LIMIT);
	assert_int_equal(v.signal, SIGTERM);
	assert_int_equal(t.limit_reason, ACCT_EXIT_TIME_LIMIT);
	assert_false(t.kill_sent);
	assert_int_equal(t.term_sent_mono, 110 * S);
	assert_true(sv_kill_grace(&t, 113 * S, 3 * S, &due));
	t.exit.wait_status = W_EXITCODE(0, SIGKILL);
	sv_decide_status(&t, 0);
	assert_string_equal(acct_exit_status_to_string(t.status), "time_limit");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(time_limit_fires_at_the_limit),
	    cmocka_unit_test(no_limit_no_verdict),
	    cmocka_unit_test(kill_after_the_grace),
	    cmocka_unit_test(zero_grace_kills_at_once),
	    cmocka_unit_test(first_limit_wins),
	    cmocka_unit_test(cpu_check_waits_for_the_fastest_spend),
	    cmocka_unit_test(cpu_check_backs_off_an_idle_task),
	    cmocka_unit_test(cpu_limit_fires_on_time),
	    cmocka_unit_test(oom_kills_reported_once),
	    cmocka_unit_test(exit_status_decided),
	    cmocka_unit_test(time_limit_whole_story),
	    cmocka_unit_test(meter_limit_kills_at_once),
	    cmocka_unit_test(meter_limit_after_another),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
