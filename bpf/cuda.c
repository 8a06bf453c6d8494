// SPDX-License-Identifier: MIT
/* Loader for bpf/cuda.bpf.c: open -> size maps (or reuse the meter's membership map) -> load ->
 * attach raw_tp + uprobes. */
#include "bpf/cuda.h"
#include "bpf/track.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/cuda_types.h"
#include "bpf/member_types.h"
#include "common/macro.h"
#include "cuda.skel.h"

#define CUDA_LINKS_MAX 64

struct cuda_meter {
	struct cuda_bpf *skel;
	struct bpf_link *links[CUDA_LINKS_MAX];
	unsigned n_links;
	unsigned n_probes;
	int members_fd; /* the meter's membership map (cuda_opts.share_members), else -1 */
};

void cuda_free(struct cuda_meter *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < c->n_links; i++)
		bpf_link__destroy(c->links[i]);
	cuda_bpf__destroy(c->skel);
	free(c);
}

static int add_link(struct cuda_meter *c, struct bpf_link *l)
{
	if (!l)
		return errno ? -errno : -EINVAL;
	if (c->n_links >= CUDA_LINKS_MAX) {
		bpf_link__destroy(l);
		return -E2BIG;
	}
	c->links[c->n_links++] = l;
	return 0;
}

int cuda_open(const struct cuda_opts *opts, struct cuda_meter **ret)
{
	struct cuda_opts o = opts ? *opts : (struct cuda_opts){};
	struct cuda_meter *c;
	int r;

	if (!o.max_tasks)
		o.max_tasks = 1024;
	if (!o.max_pids)
		o.max_pids = o.max_tasks * 64;
	if (!o.max_allocs)
		o.max_allocs = 262144;
	if (o.share_members) {
		struct bpf_map_info info = {};
		uint32_t len = sizeof(info);

		if (o.members_fd < 0 || bpf_obj_get_info_by_fd(o.members_fd, &info, &len) < 0 ||
		    info.key_size != sizeof(uint32_t) || info.value_size != sizeof(struct member))
			return -EINVAL;
		o.max_pids = info.max_entries;
	}
	if (o.max_tasks > 65536 || o.max_pids > 4194304 || o.max_allocs > 4194304)
		return -ERANGE;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->members_fd = o.share_members ? o.members_fd : -1;
	c->skel = cuda_bpf__open();
	if (!c->skel) {
		r = errno ? -errno : -EINVAL;
		goto out_free;
	}
	if ((r = bpf_map__set_max_entries(c->skel->maps.tasks, o.max_tasks)) < 0 ||
	    (r = bpf_map__set_max_entries(c->skel->maps.overheads, o.max_tasks)) < 0 ||
	    (r = c->members_fd >= 0
		     ? bpf_map__reuse_fd(c->skel->maps.procs, c->members_fd)
		     : bpf_map__set_max_entries(c->skel->maps.procs, o.max_pids)) < 0 ||
	    (r = bpf_map__set_max_entries(c->skel->maps.pbytes, o.max_pids)) < 0 ||
	    (r = bpf_map__set_max_entries(c->skel->maps.allocs, o.max_allocs)) < 0)
		goto out_free;
	/* With the meter's map its fork program keeps the membership: no fork program here. */
	c->skel->rodata->own_members = c->members_fd < 0;
	bpf_program__set_autoload(c->skel->progs.cuda_fork, c->members_fd < 0);
	r = cuda_bpf__load(c->skel);
	if (r < 0)
		goto out_free;
	if (c->members_fd < 0)
		r = add_link(c, bpf_program__attach(c->skel->progs.cuda_fork));
	if (r >= 0)
		r = add_link(c, bpf_program__attach(c->skel->progs.cuda_exit));
	if (r < 0)
		goto out_free;
	*ret = c;
	return 0;

out_free:
	cuda_free(c);
	return r;
}

struct probe {
	const char *func;
	bool ret;
	bool required;
};

static struct bpf_program *probe_prog(struct cuda_bpf *s, const char *func, bool ret)
{
	if (ret)
		return s->progs.mem_alloc_ret;
	if (strcmp(func, "cuMemAllocPitch_v2") == 0)
		return s->progs.mem_alloc_pitch;
	if (strncmp(func, "cuMemAlloc", 10) == 0)
		return s->progs.mem_alloc;
	if (strncmp(func, "cuMemFree", 9) == 0)
		return s->progs.mem_free;
	if (strcmp(func, "cuLaunchKernel") == 0)
		return s->progs.launch_kernel;
	if (strncmp(func, "cuMemcpyHtoD", 12) == 0)
		return s->progs.memcpy_htod;
	return s->progs.memcpy_dtoh;
}

int cuda_attach_library(struct cuda_meter *c, const char *path)
{
	static const struct probe probes[] = {
	    {"cuMemAlloc_v2", false, true},	    {"cuMemAlloc_v2", true, true},
	    {"cuMemFree_v2", false, true},	    {"cuLaunchKernel", false, true},
	    {"cuMemAllocManaged", false, false},    {"cuMemAllocManaged", true, false},
	    {"cuMemAllocPitch_v2", false, false},   {"cuMemAllocPitch_v2", true, false},
	    {"cuMemAllocAsync", false, false},	    {"cuMemAllocAsync", true, false},
	    {"cuMemFreeAsync", false, false},	    {"cuMemcpyHtoD_v2", false, false},
	    {"cuMemcpyDtoH_v2", false, false},	    {"cuMemcpyHtoDAsync_v2", false, false},
	    {"cuMemcpyDtoHAsync_v2", false, false},
	};
	unsigned first = c->n_links, attached = 0;
	int r;

	if (!path || access(path, R_OK) < 0)
		return -ENOENT;
	for (size_t i = 0; i < ARRAY_SIZE(probes); i++) {
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .func_name = probes[i].func,
			    .retprobe = probes[i].ret);
		struct bpf_link *l;

		l = bpf_program__attach_uprobe_opts(
		    probe_prog(c->skel, probes[i].func, probes[i].ret), -1, path, 0, &uo);
		if (!l) {
			r = errno ? -errno : -ENOENT;
			if (!probes[i].required)
				continue;
			goto out_detach;
		}
		r = add_link(c, l);
		if (r < 0)
			goto out_detach;
		attached++;
	}
	c->n_probes += attached;
	return (int)attached;

out_detach:
	while (c->n_links > first)
		bpf_link__destroy(c->links[--c->n_links]);
	return r;
}

int cuda_find_library(char *buf, size_t len)
{
	struct link_map *lm = NULL;
	void *h;
	int r = 0;

	h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (!h)
		return -ENOENT;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) < 0 || !lm || !lm->l_name || !*lm->l_name)
		r = -ENOENT;
	else if ((size_t)snprintf(buf, len, "%s", lm->l_name) >= len)
		r = -ENAMETOOLONG;
	dlclose(h);
	return r;
}

bool cuda_members_shared(const struct cuda_meter *c)
{
	return c->members_fd >= 0;
}

int cuda_members_fd(const struct cuda_meter *c)
{
	return bpf_map__fd(c->skel->maps.procs);
}

/*
 * Makes tgid a member of task_key. Shared map: a process the meter (or the audit trail) has
 * made a member of the same task already is one; otherwise the entry is this object's (gen 0:
 * not metered; the meter takes it over if it tracks the process later).
 */
static int add_member(struct cuda_meter *c, uint64_t task_key, pid_t tgid)
{
	int fd = bpf_map__fd(c->skel->maps.procs), r;
	struct member m = {.task_key = task_key};
	uint32_t k = (uint32_t)tgid;

	if (c->members_fd < 0)
		return bpf_map_update_elem(fd, &k, &m, BPF_ANY) < 0 ? -errno : 0;
	r = track_add_proc(fd, tgid, &m);
	if (r == -EBUSY && bpf_map_lookup_elem(fd, &k, &m) == 0 && m.task_key == task_key)
		return 0;
	return r;
}

int cuda_track(struct cuda_meter *c, uint64_t task_key, pid_t tgid, uint64_t limit)
{
	struct cuda_task t = {.limit_bytes = limit, .root_tgid = (uint32_t)tgid};
	int tasks_fd = bpf_map__fd(c->skel->maps.tasks);

	if (tgid <= 0)
		return -EINVAL;
	if (bpf_map_update_elem(tasks_fd, &task_key, &t, BPF_NOEXIST) < 0 && errno != EEXIST)
		return -errno;
	return add_member(c, task_key, tgid);
}

int cuda_set_overhead(struct cuda_meter *c, uint64_t task_key, uint64_t bytes)
{
	__u64 v = bytes;

	if (bpf_map_update_elem(bpf_map__fd(c->skel->maps.overheads), &task_key, &v, BPF_ANY) < 0)
		return -errno;
	return 0;
}

int cuda_read(struct cuda_meter *c, uint64_t task_key, struct cuda_usage *ret)
{
	struct cuda_task t;

	if (bpf_map_lookup_elem(bpf_map__fd(c->skel->maps.tasks), &task_key, &t) < 0)
		return -errno;
	*ret = (struct cuda_usage){
	    .limit_bytes = t.limit_bytes,
	    .current_bytes = t.tracked_bytes > 0 ? (uint64_t)t.tracked_bytes : 0,
	    .peak_bytes = t.peak_bytes,
	    .alloc_bytes = t.alloc_bytes,
	    .alloc_calls = t.alloc_calls,
	    .free_bytes = t.free_bytes,
	    .free_calls = t.free_calls,
	    .launches = t.launches,
	    .memcpy_htod_bytes = t.htod_bytes,
	    .memcpy_dtoh_bytes = t.dtoh_bytes,
	    .untracked = t.untracked,
	    .limit_fired = t.limit_fired > 0,
	    .killed_tgid = t.killed_tgid,
	    .killed_request_bytes = t.killed_request_bytes,
	};
	return 0;
}

/*
 * Whether cuda_forget sweeps the membership map for the task: always in a map of its own; in
 * the meter's only when the task's first process is still an entry of this object's (gen 0:
 * the meter never took it over; the meter's exit program drops entries as processes end, and
 * meter_forget sweeps its own).
 */
static bool sweep_members(struct cuda_meter *c, uint64_t task_key)
{
	struct cuda_task t;
	struct member m;
	uint32_t k;

	if (c->members_fd < 0)
		return true;
	if (bpf_map_lookup_elem(bpf_map__fd(c->skel->maps.tasks), &task_key, &t) < 0)
		return false;
	k = t.root_tgid;
	return bpf_map_lookup_elem(bpf_map__fd(c->skel->maps.procs), &k, &m) == 0 &&
	       m.task_key == task_key && !m.gen;
}

int cuda_forget(struct cuda_meter *c, uint64_t task_key)
{
	int r = 0;

	if (sweep_members(c, task_key))
		r = track_delete_by_task(bpf_map__fd(c->skel->maps.procs), sizeof(__u32),
					 sizeof(struct member), task_key, UINT32_MAX - 1);
	if (r >= 0) {
		r = track_delete_by_task(bpf_map__fd(c->skel->maps.pbytes), sizeof(__u32),
					 sizeof(struct cuda_proc), task_key, UINT32_MAX - 1);
		/* Whoever deletes an entry (this, or the exit program) takes it off the count. */
		if (r > 0)
			__atomic_fetch_sub(&c->skel->bss->pbytes_n, r, __ATOMIC_SEQ_CST);
	}
	if (r >= 0)
		r = track_delete_by_task(bpf_map__fd(c->skel->maps.allocs),
					 sizeof(struct cuda_alloc_key), sizeof(struct cuda_alloc),
					 task_key, UINT32_MAX - 1);
	(void)bpf_map_delete_elem(bpf_map__fd(c->skel->maps.overheads), &task_key);
	if (bpf_map_delete_elem(bpf_map__fd(c->skel->maps.tasks), &task_key) < 0 &&
	    errno != ENOENT && r >= 0)
		r = -errno;
	return r < 0 ? r : 0;
}

unsigned cuda_probes_attached(const struct cuda_meter *c)
{
	return c->n_probes;
}
