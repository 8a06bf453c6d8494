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
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/energy.h"
#include "agent/gpu_glue.h"
#include "agent/log.h"
#include "agent/emit.h"
#include "common/clock.h"
#include "common/macro.h"
#include "isolation/gpu.h"

struct node_sampler {
	uint64_t last_mono;    /* monotonic time of the last record */
	uint64_t last_busy_ns; /* node CPU time then */
	bool have_busy;
	bool failed_logged;
	bool rapl; /* energy meter opened */
	struct energy_meter energy;
	bool have_gpu_mj; /* the GPUs' energy counters then */
	unsigned long long last_gpu_mj;
};

/* Energy over the period: RAPL zones and the GPUs' counters (each since the last record). */
static void add_energy(struct agent *a, struct node_sampler *s, struct acct_node_sample *ns)
{
	unsigned long long mj;
	double j[_ENERGY_KIND_MAX];

	if (s->rapl && energy_read(&s->energy, j) == 0) {
		ns->has_rapl = true;
		ns->energy_package_j = j[ENERGY_PACKAGE];
		ns->energy_dram_j = j[ENERGY_DRAM];
	}
	if (gpu_glue_energy_mj(a, &mj)) {
		/* a counter that went down (driver reloaded): nothing for this period */
		if (s->have_gpu_mj && mj >= s->last_gpu_mj) {
			ns->has_gpu_energy = true;
			ns->energy_gpu_j = (double)(mj - s->last_gpu_mj) / 1e3;
		} else if (!s->have_gpu_mj) {
			ns->has_gpu_energy = true; /* the first record: 0 J over no time */
		}
		s->last_gpu_mj = mj;
		s->have_gpu_mj = true;
	} else
		s->have_gpu_mj = false;
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
	add_energy(a, s, ns);
	s->last_mono = now_mono;
	e = agent_emit_record(a, &r);
	if (e < 0 && e != -ENOSPC)
		log_error("node.sample: %s", strerror(-e));

out_clear:
	acct_record_clear(&r);
	return e;
}

int node_sample_start(struct agent *a, uint64_t now_mono)
{
	struct node_sampler *s = calloc(1, sizeof(*s));

	const char *root = a->cfg.energy_powercap_root ?: "/sys/class/powercap";
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
	return emit(a, s, now_mono);
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
	free(a->node_sampler);
	a->node_sampler = NULL;
}
