/* SPDX-License-Identifier: MIT */
/*
 * node.sample emission (docs/pipeline.md "Node records"). Each record stands for the interval
 * since the agent's previous one: capacity (allocatable CPUs and memory, the GPUs and their
 * models) taken as constant over it, the running tasks' requests at its end, the node's CPU
 * time over it and its memory in use at its end. The collector prices capacity per day from
 * these intervals (collector/billing.c, rollup node_day).
 */
#include "agent/node_sample.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/energy.h"
#include "agent/gpu_glue.h"
#include "agent/task.h"
#include "agent/log.h"
#include "agent/emit.h"
#include "agent/task.h"
#include "common/clock.h"
#include "common/macro.h"
#include "common/fileio.h"
#include "isolation/cgroup.h"
#include "isolation/gpu.h"

struct node_sampler {
	uint64_t last_mono;    /* monotonic time of the last record */
	uint64_t last_busy_ns; /* node CPU time then */
	bool have_busy;
	bool failed_logged;
	bool rapl; /* energy meter opened */
	struct energy_meter energy;
	/* each GPU's energy counter at the last record (an allocated GPU's as its task's meter
	 * read it), and what tasks that ended since were given (mJ) */
	bool have_gpu_mj;
	size_t n_gpu;
	unsigned long long last_gpu_mj[GPU_MAX];
	uint64_t ended_gpu_mj;
	/* the current period: what tasks that ended within it were given (uJ) */
	uint64_t ended_uj[_ENERGY_KIND_MAX];
	uint64_t attr_periods, attr_cpu_ns; /* node_energy_stats */
};

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

static bool task_shares_energy(const struct task *t)
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
		if (!task_shares_energy(t))
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
		if (!task_shares_energy(t) || !t->energy.based)
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

	if (!task_shares_energy(t) || !t->energy.based || !s || !s->rapl || !s->last_mono) {
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
static void add_energy(struct agent *a, struct node_sampler *s, struct acct_node_sample *ns,
		       uint64_t now_mono)
{
	uint64_t uj[_ENERGY_KIND_MAX] = {0};
	const uint64_t cpu0 = s->rapl ? now_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
	bool have = false;

	if (s->rapl && energy_read_uj(&s->energy, uj, true) == 0) {
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

static int read_small(const char *path, char *buf, size_t size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0;

	if (fd < 0)
		return -errno;
	while (len < size - 1) {
		ssize_t n = read(fd, buf + len, size - 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = 0;
	return 0;
}

/* "Key:   12345 kB" in /proc/meminfo, in bytes */
static int meminfo_get(const char *text, const char *key, uint64_t *ret)
{
	size_t kl = strlen(key);
	const char *p = text;
	unsigned long long v;

	for (; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, kl) == 0 && p[kl] == ':') {
			if (sscanf(p + kl + 1, "%llu kB", &v) != 1 || v > UINT64_MAX / 1024)
				return -EBADMSG;
			*ret = (uint64_t)v * 1024;
			return 0;
		}
	return -EBADMSG;
}

int node_proc_read(const char *proc_root, struct node_proc *ret)
{
	char path[4096], buf[8192];
	unsigned long long f[8] = {0};
	uint64_t total = 0, avail = 0, busy = 0;
	long hz = sysconf(_SC_CLK_TCK);
	int r;

	if (hz <= 0)
		hz = 100;
	snprintf(path, sizeof(path), "%s/stat", proc_root);
	if ((r = read_small(path, buf, sizeof(buf))) < 0)
		return r;
	/* cpu  user nice system idle iowait irq softirq steal (guest is inside user) */
	if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3],
		   &f[4], &f[5], &f[6], &f[7]) < 4)
		return -EBADMSG;
	for (int i = 0; i < 8; i++)
		if (i != 3 && i != 4)
			busy += f[i];
	snprintf(path, sizeof(path), "%s/meminfo", proc_root);
	if ((r = read_small(path, buf, sizeof(buf))) < 0)
		return r;
	if ((r = meminfo_get(buf, "MemTotal", &total)) < 0 ||
	    (r = meminfo_get(buf, "MemAvailable", &avail)) < 0)
		return r;
	ret->busy_ns = busy * (NSEC_PER_SEC / (uint64_t)hz);
	ret->mem_total_bytes = total;
	ret->mem_used_bytes = total > avail ? total - avail : 0;
	return 0;
}

/* [node] labels "k=v,k=v" (checked by agent/config.c) onto the record. */
static int add_labels(struct acct_node_sample *ns, const char *labels)
{
	_cleanup_free_ char *dup = NULL;
	char *save = NULL;
	int r;

	if (!labels)
		return 0;
	dup = strdup(labels);
	if (!dup)
		return -ENOMEM;
	for (char *kv = strtok_r(dup, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');

		if (!eq)
			return -EINVAL;
		*eq = 0;
		if ((r = acct_node_add_label(ns, kv, eq + 1)) < 0)
			return r;
	}
	return 0;
}

static int emit(struct agent *a, struct node_sampler *s, uint64_t now_mono)
{
	struct acct_record r = {0};
	struct acct_node_sample *ns;
	struct node_proc p = {0};
	const char *models[GPU_MAX];
	size_t n_models;
	double cap_cpus;
	int e, pe;

	r.type = ACCT_NODE_SAMPLE;
	r.time_ns = now_ns(CLOCK_REALTIME);
	r.node = strdup(a->cfg.node);
	if (!r.node || (e = acct_record_node_sample(&r)) < 0) {
		e = -ENOMEM;
		goto out_clear;
	}
	ns = r.ns;
	ns->period_ns = s->last_mono ? now_mono - s->last_mono : 0;
	if (a->cfg.node_price_class && !(ns->price_class = strdup(a->cfg.node_price_class))) {
		e = -ENOMEM;
		goto out_clear;
	}
	if ((e = add_labels(ns, a->cfg.node_labels)) < 0)
		goto out_clear;

	/* capacity: what the agent admits (its reserves left out) */
	cap_cpus = (double)a->ncpus - a->cfg.reserve_cpus;
	ns->cap_cpus = cap_cpus > 0 ? cap_cpus : 0;
	ns->cap_memory_bytes =
	    a->mem_total > a->cfg.reserve_memory ? a->mem_total - a->cfg.reserve_memory : 0;
	n_models = gpu_glue_models(a, models, ARRAY_SIZE(models));
	ns->cap_gpus = (uint32_t)n_models;
	for (size_t i = 0; i < n_models; i++)
		if ((e = acct_node_add_gpu_model(ns, models[i])) < 0)
			goto out_clear;

	/* allocated: the live tasks' requests, one walk per interval */
	for (struct task *t = a->tasks; t; t = t->next) {
		if (t->state == TASK_ENDED)
			continue;
		ns->alloc_cpus += t->spec.cpus;
		ns->alloc_memory_bytes += t->spec.memory_max;
		ns->alloc_gpus += t->spec.gpus;
		ns->alloc_tasks++;
	}

	pe = node_proc_read("/proc", &p);
	if (pe == 0) {
		ns->used_memory_bytes = p.mem_used_bytes;
		if (s->have_busy && p.busy_ns >= s->last_busy_ns && ns->period_ns)
			ns->used_cpu_ns = p.busy_ns - s->last_busy_ns;
		s->last_busy_ns = p.busy_ns;
		s->have_busy = true;
	} else if (!s->failed_logged) {
		s->failed_logged = true;
		log_warning("node.sample: reading /proc/stat and /proc/meminfo failed: %s (the "
			    "node's use is reported as 0)",
			    strerror(-pe));
	}
	add_energy(a, s, ns, now_mono);
	/* the running tasks unchanged since their last task.sample, at this record's time */
	task_list_unchanged(a, ns, r.time_ns);
	s->last_mono = now_mono;
	e = agent_emit_record(a, &r);
	if (e < 0 && e != -ENOSPC)
		log_error("node.sample: %s", strerror(-e));

out_clear:
	acct_record_clear(&r);
	return e;
}

/*
 * Energy across an agent restart (docs/metering.md "Energy"): at a stop the sampler's state
 * (the RAPL counters' last values, the period's start, what tasks that ended in it were
 * given) goes to <state_dir>/node-energy.json and each live task's baseline and shares to its
 * state file, under one token (the period's start). The next start on the same boot takes
 * them back: its first node.sample covers the whole interval since the last one before the
 * stop (the agent's downtime included: the counters ran on), attributed to the re-adopted
 * tasks by their CPU time and memory from their cgroups as any period, so a task's energy and
 * the sum rule (tasks + unattributed = the node's energy) hold across the restart. The file is
 * removed once read: a later crash cannot bring back a stale state.
 */
static void node_path(const struct agent *a, char *buf, size_t len)
{
	snprintf(buf, len, "%s/node-energy.json", a->cfg.state_dir);
}

static void energy_save(struct agent *a, struct node_sampler *s)
{
	char path[4096];
	json_t *j, *zones;
	_cleanup_free_ char *txt = NULL;
	int r;

	if (!s->rapl || !s->last_mono)
		return;
	zones = json_array();
	j = json_pack("{s:s,s:I,s:I,s:b,s:I,s:I,s:o}", "boot_id", a->boot_id, "last_mono",
		      (json_int_t)s->last_mono, "last_busy_ns", (json_int_t)s->last_busy_ns,
		      "have_busy", s->have_busy, "ended_package_uj",
		      (json_int_t)s->ended_uj[ENERGY_PACKAGE], "ended_dram_uj",
		      (json_int_t)s->ended_uj[ENERGY_DRAM], "zones", zones);
	if (!j)
		return;
	if (s->have_gpu_mj) { /* the GPUs' counters at the last record, as add_gpu_energy left them
			       */
		json_t *g = json_array();

		for (size_t i = 0; g && i < s->n_gpu; i++)
			json_array_append_new(g, json_integer((json_int_t)s->last_gpu_mj[i]));
		json_object_set_new(j, "gpu_mj", g);
		json_object_set_new(j, "ended_gpu_mj", json_integer((json_int_t)s->ended_gpu_mj));
	}
	for (size_t i = 0; i < s->energy.n; i++)
		json_array_append_new(zones,
				      json_pack("{s:s,s:I}", "dir", s->energy.z[i].dir, "last_uj",
						(json_int_t)s->energy.z[i].last_uj));
	txt = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	node_path(a, path, sizeof(path));
	r = txt ? write_file_replace(path, txt, strlen(txt), 0600) : -ENOMEM;
	if (r < 0) {
		log_warning("node.sample: saving the energy state to %s failed: %s (re-adopted "
			    "tasks' energy will say not measured)",
			    path, strerror(-r));
		return;
	}
	/* the tasks' baselines and shares, under the same token */
	a->energy_save_token = s->last_mono;
	for (struct task *t = a->tasks; t; t = t->next)
		if (task_shares_energy(t) && t->energy.based && (r = task_save(a, t)) < 0)
			log_warning("task %s: saving its energy state failed: %s", t->id,
				    strerror(-r));
	a->energy_save_token = 0;
}

/* The GPUs' counters of the saved state: the first record after the restart then covers the
 * downtime for the GPUs too (a count that differs from this run's inventory: not taken, see
 * add_gpu_energy). */
static void gpu_restore(struct node_sampler *s, json_t *j)
{
	json_t *g = json_object_get(j, "gpu_mj"), *v;
	size_t i;

	if (!json_is_array(g) || json_array_size(g) == 0 || json_array_size(g) > GPU_MAX)
		return;
	json_array_foreach(g, i, v)
	{
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return;
		s->last_gpu_mj[i] = (unsigned long long)json_integer_value(v);
	}
	s->n_gpu = json_array_size(g);
	s->ended_gpu_mj = (uint64_t)json_integer_value(json_object_get(j, "ended_gpu_mj"));
	s->have_gpu_mj = true;
}

/* The saved state of the previous run on this boot, if any: into s, the token in *ret. */
static void energy_restore(struct agent *a, struct node_sampler *s, uint64_t *ret)
{
	char path[4096];
	json_error_t e;
	json_t *j, *zones, *z;
	size_t i;
	bool ok;

	*ret = 0;
	node_path(a, path, sizeof(path));
	j = json_load_file(path, 0, &e);
	(void)unlink(path);
	if (!j)
		return;
	zones = json_object_get(j, "zones");
	ok = s->rapl && json_is_array(zones) && json_array_size(zones) == s->energy.n &&
	     json_is_string(json_object_get(j, "boot_id")) &&
	     strcmp(json_string_value(json_object_get(j, "boot_id")), a->boot_id) == 0 &&
	     json_integer_value(json_object_get(j, "last_mono")) > 0;
	json_array_foreach(zones, i, z)
	{
		json_t *d = json_object_get(z, "dir");

		if (!ok || !json_is_string(d) || strcmp(json_string_value(d), s->energy.z[i].dir))
			ok = false;
	}
	if (ok) {
		json_array_foreach(zones, i, z)
		{
			s->energy.z[i].last_uj =
			    (uint64_t)json_integer_value(json_object_get(z, "last_uj"));
		}
		s->last_mono = (uint64_t)json_integer_value(json_object_get(j, "last_mono"));
		s->last_busy_ns = (uint64_t)json_integer_value(json_object_get(j, "last_busy_ns"));
		s->have_busy = json_is_true(json_object_get(j, "have_busy"));
		s->ended_uj[ENERGY_PACKAGE] =
		    (uint64_t)json_integer_value(json_object_get(j, "ended_package_uj"));
		s->ended_uj[ENERGY_DRAM] =
		    (uint64_t)json_integer_value(json_object_get(j, "ended_dram_uj"));
		gpu_restore(s, j);
		*ret = s->last_mono;
	} else
		log_warning("%s: not this boot's or these RAPL zones: the energy of re-adopted "
			    "tasks says not measured",
			    path);
	json_decref(j);
}

int node_sample_start(struct agent *a, uint64_t now_mono)
{
	struct node_sampler *s = calloc(1, sizeof(*s));

	const char *root = a->cfg.energy_powercap_root ?: "/sys/class/powercap";
	uint64_t token;
	unsigned n = 0;
	int r;

	if (!s)
		return -ENOMEM;
	a->node_sampler = s;
	r = energy_open(root, &s->energy);
	s->rapl = r == 0;
	if (r == 0)
		log_info("node.sample: CPU package and DRAM energy from %zu RAPL zone(s) under %s",
			 s->energy.n, root);
	else
		log_info("node.sample: no RAPL energy zones under %s (%s): no CPU energy reported",
			 root, strerror(-r));
	energy_restore(a, s, &token);
	/* re-adopted tasks whose energy was saved at that stop go on; the others say not
	 * measured (an older agent's file, a crash: nothing saved) */
	for (struct task *t = a->tasks; t; t = t->next) {
		if (!t->adopted || !t->energy.restore_token)
			continue;
		if (token && t->energy.restore_token == token && t->state != TASK_ENDED) {
			t->energy.restored = true;
			n++;
			continue;
		}
		t->energy.based = false;
		t->energy.restore_token = 0;
		t->energy.cpu_uj = t->energy.dram_uj = 0;
		t->energy.gpu_given_mj = 0;
	}
	if (token)
		log_info("node.sample: energy state of the previous run taken back (%u task(s) "
			 "go on)",
			 n);
	return emit(a, s, now_mono);
}

void node_energy_stats(const struct agent *a, struct node_energy_stats *ret)
{
	const struct node_sampler *s = a->node_sampler;

	*ret = (struct node_energy_stats){0};
	if (!s)
		return;
	ret->rapl = s->rapl;
	ret->periods = s->attr_periods;
	ret->cpu_ns = s->attr_cpu_ns;
}

void node_sample_tick(struct agent *a, uint64_t now_mono)
{
	struct node_sampler *s = a->node_sampler;

	if (!s || now_mono - s->last_mono < a->cfg.sample_interval_ns)
		return;
	(void)emit(a, s, now_mono);
}

void node_sample_stop(struct agent *a)
{
	if (a->node_sampler)
		energy_save(a, a->node_sampler);
	free(a->node_sampler);
	a->node_sampler = NULL;
}
