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
#include "agent/node_energy.h"
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

	/* allocated: the live tasks' requests, summed as tasks join and leave (no walk) */
	ns->alloc_cpus = (double)a->live_cpus_micro / 1e6;
	ns->alloc_memory_bytes = a->live_memory_bytes;
	ns->alloc_gpus = (uint32_t)a->live_gpus;
	ns->alloc_tasks = a->n_live;

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
	node_energy_add(a, s, ns, now_mono);
	/* the running tasks unchanged since their last task.sample, at this record's time */
	task_list_unchanged(a, ns, r.time_ns);
	s->last_mono = now_mono;
	e = agent_emit_record(a, &r);
	task_list_unchanged_done(a, ns, r.time_ns, e >= 0);
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
		if (node_energy_task_shares(t) && t->energy.based && (r = task_save(a, t)) < 0)
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
