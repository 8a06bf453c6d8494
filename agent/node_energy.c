/* SPDX-License-Identifier: MIT */
/*
 * Energy per task (docs/reports.md "Energy"): the node's RAPL energy of each node.sample period
 * shared among the running tasks, the GPUs' energy and what of it no task was given. Called by
 * the node sampler at each period's end (node_energy_add), by the task table when a task ends
 * and by the usage read; it reads tasks but never calls the task table.
 */
#include "agent/node_energy.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/gpu_glue.h"
#include "common/clock.h"
#include "isolation/cgroup.h"

static uint64_t j_to_mj(double j)
{
	return j > 0 ? (uint64_t)llround(j * 1000.0) : 0;
}

/* The task's CPU time and memory now, from its cgroup: exact and live (the BPF meter's live
 * figure lags by each thread's time since its last switch-out). */
static bool task_cpu_mem(const struct task *t, uint64_t *cpu_ns, uint64_t *mem_bytes)
{
	struct cg_stats st;

	if (!t->cg || cg_task_stats(t->cg, &st) < 0)
		return false;
	*cpu_ns = st.cpu_usage_ns;
	*mem_bytes = st.memory_current;
	return true;
}

/*
 * The task's shares since its baseline (uJ), given e (the energy since the period's start),
 * over span_ns (the period so far): CPU time over CPUs x span, memory byte-seconds over
 * MemTotal x span. The memory is its memory now held since the baseline, or at its end (its
 * processes gone, their memory freed) the baseline's. The baseline moves to now.
 */
static void task_share(const struct agent *a, struct task *t, const uint64_t e[_ENERGY_KIND_MAX],
		       uint64_t span_ns, uint64_t now_mono, bool ending,
		       uint64_t ret[_ENERGY_KIND_MAX])
{
	unsigned __int128 cap_cpu = (unsigned __int128)a->ncpus * span_ns;
	unsigned __int128 cap_mem = (unsigned __int128)a->mem_total * span_ns;
	uint64_t cpu, mem, dcpu, dt;
	unsigned __int128 bs, v;

	ret[ENERGY_PACKAGE] = ret[ENERGY_DRAM] = 0;
	if (!task_cpu_mem(t, &cpu, &mem))
		return;
	dcpu = cpu > t->energy.cpu_ns ? cpu - t->energy.cpu_ns : 0;
	dt = now_mono > t->energy.at_mono ? now_mono - t->energy.at_mono : 0;
	bs = (unsigned __int128)(ending ? t->energy.mem_bytes : mem) * dt;
	if (cap_cpu) {
		v = (unsigned __int128)e[ENERGY_PACKAGE] * dcpu / cap_cpu;
		ret[ENERGY_PACKAGE] = v > e[ENERGY_PACKAGE] ? e[ENERGY_PACKAGE] : (uint64_t)v;
	}
	if (cap_mem) {
		v = (unsigned __int128)e[ENERGY_DRAM] * bs / cap_mem;
		ret[ENERGY_DRAM] = v > e[ENERGY_DRAM] ? e[ENERGY_DRAM] : (uint64_t)v;
	}
	t->energy.cpu_ns = cpu;
	t->energy.mem_bytes = mem;
	t->energy.at_mono = now_mono;
}

bool node_energy_task_shares(const struct task *t)
{
	return t->state != TASK_ENDED && !t->energy.done && (!t->adopted || t->energy.restored);
}

/*
 * The period's RAPL energy e (uJ) over the live tasks, at its end: each its share, all of
 * them scaled down together where they (with the ended tasks' shares) would pass e (CPU time
 * read a little after the boundary); the rest is the record's unattributed energy. Without a
 * reading (no RAPL, a zone unreadable, the first record) only the baselines move.
 */
static void attribute(struct agent *a, struct node_sampler *s, struct acct_node_sample *ns,
		      const uint64_t e[_ENERGY_KIND_MAX], bool have_e, uint64_t now_mono)
{
	uint64_t want[_ENERGY_KIND_MAX] = {0}, avail[_ENERGY_KIND_MAX], sh[_ENERGY_KIND_MAX];
	uint64_t given[_ENERGY_KIND_MAX];

	if (!s->rapl)
		return;
	have_e = have_e && ns->period_ns > 0;
	for (int k = 0; k < _ENERGY_KIND_MAX; k++) {
		uint64_t ended = have_e ? s->ended_uj[k] : 0;

		avail[k] = have_e && e[k] > ended ? e[k] - ended : 0;
		given[k] = ended < e[k] || !have_e ? ended : e[k];
	}
	for (struct task *t = a->tasks; t; t = t->next) {
		if (!node_energy_task_shares(t))
			continue;
		if (!t->energy.based) {
			uint64_t cpu, mem;

			if (task_cpu_mem(t, &cpu, &mem)) {
				t->energy = (struct task_energy){.based = true,
								 .cpu_ns = cpu,
								 .mem_bytes = mem,
								 .at_mono = now_mono,
								 .cpu_uj = t->energy.cpu_uj,
								 .dram_uj = t->energy.dram_uj};
			}
			continue;
		}
		task_share(a, t, e, ns->period_ns, now_mono, false, sh);
		/* kept on the task until the scale is known: the baseline has moved */
		t->energy.pend_uj[ENERGY_PACKAGE] = have_e ? sh[ENERGY_PACKAGE] : 0;
		t->energy.pend_uj[ENERGY_DRAM] = have_e ? sh[ENERGY_DRAM] : 0;
		for (int k = 0; k < _ENERGY_KIND_MAX; k++)
			want[k] += t->energy.pend_uj[k];
	}
	for (struct task *t = a->tasks; t; t = t->next) {
		if (!node_energy_task_shares(t) || !t->energy.based)
			continue;
		for (int k = 0; k < _ENERGY_KIND_MAX; k++) {
			uint64_t v = t->energy.pend_uj[k];

			if (want[k] >
			    avail[k]) /* floor(v * avail / want): the sum stays <= avail */
				v = (uint64_t)((unsigned __int128)v * avail[k] / want[k]);
			t->energy.pend_uj[k] = 0;
			given[k] += v;
			if (k == ENERGY_PACKAGE)
				t->energy.cpu_uj += v;
			else
				t->energy.dram_uj += v;
		}
	}
	if (have_e) {
		ns->has_unattributed = true;
		ns->unattributed_package_j =
		    (double)(e[ENERGY_PACKAGE] - given[ENERGY_PACKAGE]) / 1e6;
		ns->unattributed_dram_j = (double)(e[ENERGY_DRAM] - given[ENERGY_DRAM]) / 1e6;
	}
	memset(s->ended_uj, 0, sizeof(s->ended_uj));
}

void node_energy_task_end(struct agent *a, struct task *t)
{
	struct node_sampler *s = a->node_sampler;
	uint64_t e[_ENERGY_KIND_MAX], sh[_ENERGY_KIND_MAX], now = now_ns(CLOCK_MONOTONIC);

	/* its GPUs' energy since the last record (agent/node_sample.c add_gpu_energy) */
	if (s && t->spec.gpus && t->energy.gpu_valid && !t->energy.done) {
		uint64_t c = j_to_mj(t->energy.gpu_j);

		s->ended_gpu_mj += c > t->energy.gpu_given_mj ? c - t->energy.gpu_given_mj : 0;
		t->energy.gpu_given_mj = c;
	}

	if (!node_energy_task_shares(t) || !t->energy.based || !s || !s->rapl || !s->last_mono) {
		t->energy.done = true;
		node_energy_usage(a, t, &t->usage.energy);
		return;
	}
	/* the energy of the period so far; what the other ended tasks got stays theirs */
	if (energy_read_uj(&s->energy, e, false) == 0) {
		task_share(a, t, e, now - s->last_mono, now, true, sh);
		for (int k = 0; k < _ENERGY_KIND_MAX; k++) {
			uint64_t left = e[k] > s->ended_uj[k] ? e[k] - s->ended_uj[k] : 0;

			sh[k] = sh[k] < left ? sh[k] : left;
			s->ended_uj[k] += sh[k];
		}
		t->energy.cpu_uj += sh[ENERGY_PACKAGE];
		t->energy.dram_uj += sh[ENERGY_DRAM];
	}
	t->energy.done = true;
	node_energy_usage(a, t, &t->usage.energy); /* for its task.end */
}

bool node_energy_shared(const struct agent *a)
{
	return a->node_sampler && a->node_sampler->rapl;
}

void node_energy_usage(struct agent *a, const struct task *t, struct acct_energy *ret)
{
	struct node_sampler *s = a->node_sampler;
	bool rapl = s && s->rapl && (!t->adopted || t->energy.restored);

	memset(ret, 0, sizeof(*ret));
	ret->present = true;
	ret->src[ACCT_ENERGY_CPU] = ret->src[ACCT_ENERGY_DRAM] =
	    rapl ? ACCT_ESRC_RAPL : ACCT_ESRC_NOT_MEASURED;
	if (rapl) {
		ret->j[ACCT_ENERGY_CPU] = (double)t->energy.cpu_uj / 1e6;
		ret->j[ACCT_ENERGY_DRAM] = (double)t->energy.dram_uj / 1e6;
	}
	if (t->spec.gpus == 0) {
		ret->src[ACCT_ENERGY_GPU] = ACCT_ESRC_NONE;
	} else if (t->energy.gpu_valid) {
		ret->src[ACCT_ENERGY_GPU] = ACCT_ESRC_NVML;
		ret->j[ACCT_ENERGY_GPU] = t->energy.gpu_j;
	} else {
		ret->src[ACCT_ENERGY_GPU] = ACCT_ESRC_NOT_MEASURED;
	}
}

/*
 * The GPUs' energy over the period (each GPU's counter since the last record) and what of it
 * no task was given: a GPU allocated to a running task is read through that task's meter, so
 * the task's energy (its counters since its start) and the node's per GPU are the same
 * readings; the node's energy minus the running tasks' increase since the last record minus
 * what the tasks that ended since got after it is the GPUs without a task and the time between
 * tasks. Over the records: the tasks' GPU energy + unattributed = the node's, to the mJ.
 * Nothing for a period where a counter went down (driver reloaded) or a task's meter cannot
 * be read; the first record only takes the readings.
 */
static void add_gpu_energy(struct agent *a, struct node_sampler *s, struct acct_node_sample *ns)
{
	unsigned long long mj[GPU_MAX], tmj[GPU_MAX];
	uint64_t node = 0, given = 0, mask;
	bool tasks_ok = true, down = false;
	size_t n;

	if (!gpu_glue_energy_each_mj(a, mj, &n)) {
		s->have_gpu_mj = false;
		s->ended_gpu_mj = 0;
		return;
	}
	for (struct task *t = a->tasks; t; t = t->next) {
		double cur;
		uint64_t c;

		if (t->state == TASK_ENDED || t->spec.gpus == 0)
			continue;
		if (!gpu_glue_task_energy_j(a, t, &cur, tmj, &mask)) {
			tasks_ok = false;
			continue;
		}
		for (size_t i = 0; i < n; i++)
			if (mask & (1ULL << i))
				mj[i] = tmj[i];
		c = j_to_mj(cur);
		/* an adopted task's first reading (no record of this run before it): a baseline */
		if (s->have_gpu_mj && c >= t->energy.gpu_given_mj)
			given += c - t->energy.gpu_given_mj;
		t->energy.gpu_given_mj = c;
	}
	for (size_t i = 0; s->have_gpu_mj && i < n && n == s->n_gpu; i++) {
		if (mj[i] < s->last_gpu_mj[i])
			down = true;
		else
			node += mj[i] - s->last_gpu_mj[i];
	}
	if (!s->have_gpu_mj || n != s->n_gpu) {
		/* the first record: 0 J over no time; over a period that goes on from before a
		 * restart (energy_restore) the GPUs' energy is not known: none written */
		ns->has_gpu_energy = ns->period_ns == 0;
	} else if (!down) {
		ns->has_gpu_energy = true;
		ns->energy_gpu_j = (double)node / 1e3;
		given += s->ended_gpu_mj;
		if (tasks_ok && given <= node) {
			ns->has_unattributed_gpu = true;
			ns->unattributed_gpu_j = (double)(node - given) / 1e3;
		}
	}
	memcpy(s->last_gpu_mj, mj, n * sizeof(mj[0]));
	s->n_gpu = n;
	s->have_gpu_mj = true;
	s->ended_gpu_mj = 0;
}

/* Energy over the period: RAPL zones and the GPUs' counters (each since the last record);
 * the RAPL part shared among the tasks. */
void node_energy_add(struct agent *a, struct node_sampler *s, struct acct_node_sample *ns,
		     uint64_t now_mono)
{
	uint64_t uj[_ENERGY_KIND_MAX] = {0};
	const uint64_t cpu0 = s->rapl ? now_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
	bool have = false;

	if (s->rapl && energy_read_uj(&s->energy, uj, true) == 0) {
		/* The first record covers no time: its reading is the baseline only. The counters
		 * were first read when the zones were opened, a moment before: what they moved
		 * since was reported as this record's energy with no unattributed part beside it
		 * (no period to share it over), and the sum rule over the records lost it. */
		if (ns->period_ns == 0)
			memset(uj, 0, sizeof(uj));
		have = true;
		ns->has_rapl = true;
		ns->energy_package_j = (double)uj[ENERGY_PACKAGE] / 1e6;
		ns->energy_dram_j = (double)uj[ENERGY_DRAM] / 1e6;
	}
	attribute(a, s, ns, uj, have, now_mono);
	if (s->rapl) {
		s->attr_periods++;
		s->attr_cpu_ns += now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	}
	add_gpu_energy(a, s, ns);
}
