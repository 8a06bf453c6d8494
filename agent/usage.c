/* SPDX-License-Identifier: MIT */
/* A task's usage: the cgroup's figures, then each meter's over them (agent/usage.h). */
#include "agent/agent.h"
#include "agent/meters.h"
#include "agent/node_energy.h"
#include "agent/usage.h"
#include "common/clock.h"
#include "isolation/cgroup.h"

#include <string.h>
#include <time.h>

/*
 * usage_detail.block_read_bytes / block_write_bytes: storage bytes the task caused. With the
 * BPF meter, the kernel's per-task IO accounting (task->ioac read_bytes, write_bytes minus
 * cancelled: what /proc/PID/io shows, direct IO included, buffered writes counted when dirtied);
 * else the cgroup's block counters where they are kept. Where neither measures them, the
 * fields are absent and block_bytes_source says "not_measured": never a 0 that means unknown.
 */
static void block_bytes(struct task *t, const struct meter_merge *m, const struct cg_stats *st)
{
	json_t *d = t->usage_detail;
	const char *src = "not_measured";
	uint64_t rd = 0, wr = 0;

	if (m->blk_measured) {
		rd = m->blk_read_bytes;
		wr = m->blk_write_bytes;
		src = "ebpf";
	} else if (st && st->io_measured) {
		rd = st->io_read_bytes;
		wr = st->io_write_bytes;
		src = "cgroup";
	}
	json_object_set_new(d, "block_bytes_source", json_string(src));
	if (strcmp(src, "not_measured") == 0) {
		json_object_del(d, "block_read_bytes");
		json_object_del(d, "block_write_bytes");
		return;
	}
	json_object_set_new(d, "block_read_bytes", json_integer((json_int_t)rd));
	json_object_set_new(d, "block_write_bytes", json_integer((json_int_t)wr));
}

/* The cgroup's figures (cgroup files: exact CPU, peak memory, block IO where measured). */
static void usage_from_cgroup(struct task *t, const struct cg_stats *st, json_t *d)
{
	uint64_t tot = st->cpu_user_ns + st->cpu_system_ns;

	/* The cgroup's usage is exact (ns); its user/system split comes in ticks, so the
	 * exact total is divided in the ratio of the tick counts. */
	if (tot > 0) {
		t->usage.cpu_user_ns =
		    (uint64_t)((double)st->cpu_usage_ns * (double)st->cpu_user_ns / (double)tot);
		t->usage.cpu_system_ns = st->cpu_usage_ns - t->usage.cpu_user_ns;
	} else {
		t->usage.cpu_user_ns = st->cpu_usage_ns;
		t->usage.cpu_system_ns = 0;
	}
	t->sources[ACCT_U_CPU_USER_NS] = ACCT_SRC_CGROUP;
	t->sources[ACCT_U_CPU_SYSTEM_NS] = ACCT_SRC_CGROUP;
	if (st->memory_peak >= t->usage.memory_peak_bytes) {
		t->usage.memory_peak_bytes = st->memory_peak;
		t->sources[ACCT_U_MEMORY_PEAK_BYTES] = ACCT_SRC_CGROUP;
	}
	if (st->io_measured) {
		t->usage.io_read_bytes = st->io_read_bytes;
		t->usage.io_write_bytes = st->io_write_bytes;
		t->sources[ACCT_U_IO_READ_BYTES] = ACCT_SRC_CGROUP;
		t->sources[ACCT_U_IO_WRITE_BYTES] = ACCT_SRC_CGROUP;
	}
	t->usage.memory_byte_seconds = t->mem_byte_seconds_cg;
	t->sources[ACCT_U_MEMORY_BYTE_SECONDS] = ACCT_SRC_CGROUP;
	json_object_set_new(d, "cgroup_cpu_ns", json_integer((json_int_t)st->cpu_usage_ns));
	json_object_set_new(d, "cgroup_memory_peak_bytes",
			    json_integer((json_int_t)st->memory_peak));
	json_object_set_new(d, "cgroup_oom_kills", json_integer((json_int_t)st->oom_kills));
	if (st->io_measured) {
		json_object_set_new(d, "cgroup_block_read_bytes",
				    json_integer((json_int_t)st->io_read_bytes));
		json_object_set_new(d, "cgroup_block_write_bytes",
				    json_integer((json_int_t)st->io_write_bytes));
	}
}

void usage_collect(struct agent *a, struct task *t, const struct cg_stats *pre)
{
	struct cg_stats st = {0};
	uint64_t end = t->end_ns ? t->end_ns : now_ns(CLOCK_REALTIME);
	struct meter_merge m = {.st = &st};
	bool have;
	json_t *d;

	t->usage.wall_ns = end > t->start_ns ? end - t->start_ns : 0;
	t->sources[ACCT_U_WALL_NS] = ACCT_SRC_AGENT;
	if (!t->usage_detail)
		t->usage_detail = json_object();
	d = t->usage_detail;
	if (pre)
		st = *pre;
	have = pre ? true : t->cg && cg_task_stats(t->cg, &st) == 0;
	if (have)
		usage_from_cgroup(t, &st, d);
	m.have_st = have;
	for (const struct meter_ops *const *mp = agent_meters; *mp; mp++)
		if ((*mp)->usage)
			(*mp)->usage(a, t, &m);
	block_bytes(t, &m, have ? &st : NULL);
	node_energy_usage(a, t, &t->usage.energy); /* the shares so far, the GPUs' energy */
}
