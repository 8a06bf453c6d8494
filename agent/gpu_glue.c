/* SPDX-License-Identifier: MIT */
/*
 * GPUs in the agent: inventory at start (NVML via dlopen; absent library or no GPU turns GPU
 * features off, logged once), allocation and device policy before fork, libcuda uprobes and
 * NVML sampling while the task runs (the GPU memory limit seen, for supervise.c to act on),
 * usage at the end.
 */
#include "agent/agent.h"
#include "agent/gpu_glue.h"
#include "agent/log.h"
#include "agent/meters.h"
#include "bpf/cuda.h"
#include "bpf/meter.h"
#include "common/macro.h"
#include "common/clock.h"
#include "isolation/cgroup.h"
#include "bpf/devices.h"
#include "isolation/devices.h"
#include "isolation/gpu.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

/* Device-policy programs loaded so far, one per distinct policy, the most recently used last:
 * loading one takes milliseconds, attaching it to a task's cgroup microseconds. A program
 * dropped from the cache stays attached where it was (the cgroups hold it). */
#define DEVPROG_CACHE 16

struct gpu_state {
	struct gpu_inventory *inv;
	struct cuda_meter *cuda;
	unsigned uvm_major;
	struct devices_prog *devprogs[DEVPROG_CACHE];
	size_t n_devprogs;
	uint64_t devprog_loads;
	int devprog_load_err; /* v1 host: the program could not be loaded; v1 writes only */
	bool no_policy_logged;
};

struct gpu_task {
	struct gpu_allocation alloc;
	struct gpu_meter *meter;
	uint64_t peak_saved; /* NVML peak in the state file: saved again when it grows */
	bool cuda_tracked;
	bool over_seen;		/* the NVML watchdog saw the resident memory over the limit */
	uint64_t over_observed; /* ... that memory */
};

int gpu_glue_init(struct agent *a)
{
	struct gpu_state *g = calloc(1, sizeof(*g));
	struct cuda_opts co = {.max_tasks = a->cfg.max_tasks};
	const char *lib = getenv("CORRAL_CUDA_LIBRARY");
	char path[4096];
	int r;

	if (!g)
		return -ENOMEM;
	r = gpu_open(NULL, &g->inv);
	if (r < 0) {
		free(g);
		return r;
	}
	a->gpu = g;
	if (!gpu_enabled(g->inv)) {
		log_info("GPU features off: %s", gpu_off_reason(g->inv));
		return 0;
	}
	(void)devices_read_uvm_major(NULL, &g->uvm_major);
	log_info("GPUs: %zu found via NVML", gpu_count(g->inv));
	for (size_t i = 0; i < gpu_count(g->inv); i++) {
		const struct gpu_device *d = gpu_device(g->inv, i);

		log_info("GPU %zu: %s %s", i, d->uuid, d->name);
	}
	if (!lib && cuda_find_library(path, sizeof(path)) == 0)
		lib = path;
	if (!lib) {
		log_notice("GPU API telemetry off: no libcuda.so.1 found (NVML metering stays on)");
		return 0;
	}
	if (a->meter) {
		/* One fork and one exit program on the node keep task membership: the meter's. */
		co.share_members = true;
		co.members_fd = meter_members_fd(a->meter);
	}
	r = cuda_open(&co, &g->cuda);
	if (r < 0 && co.share_members) {
		log_warning(
		    "GPU API uprobes: sharing the meter's task membership failed (%s): with "
		    "programs of their own",
		    strerror(-r));
		co.share_members = false;
		r = cuda_open(&co, &g->cuda);
	}
	if (r == 0)
		r = cuda_attach_library(g->cuda, lib);
	if (r < 0) {
		log_warning("GPU API uprobes on %s unavailable: %s (NVML watchdog still enforces "
			    "--gpu-memory)",
			    lib, strerror(-r));
		if (g->cuda)
			cuda_free(g->cuda);
		g->cuda = NULL;
	} else
		log_info("GPU API uprobes attached to %s (%d probes)", lib, r);
	return 0;
}

void gpu_glue_fini(struct agent *a)
{
	struct gpu_state *g = a->gpu;

	if (!g)
		return;
	if (g->cuda)
		cuda_free(g->cuda);
	for (size_t i = 0; i < g->n_devprogs; i++)
		devices_bpf_free(g->devprogs[i]);
	gpu_free(g->inv);
	free(g);
	a->gpu = NULL;
}

/* The loaded program for policy p (from the cache, else loaded and cached). */
static int devprog_get(struct gpu_state *g, const struct devices_policy *p,
		       struct devices_prog **ret)
{
	struct devices_prog *d;
	size_t i;
	int r;

	for (i = 0; i < g->n_devprogs; i++)
		if (devices_policy_equal(devices_bpf_policy(g->devprogs[i]), p))
			break;
	if (i < g->n_devprogs) {
		d = g->devprogs[i];
		memmove(&g->devprogs[i], &g->devprogs[i + 1],
			(g->n_devprogs - i - 1) * sizeof(g->devprogs[0]));
		g->devprogs[g->n_devprogs - 1] = d;
		*ret = d;
		return 0;
	}
	r = devices_bpf_load(p, &d);
	if (r < 0)
		return r;
	g->devprog_loads++;
	if (g->n_devprogs == DEVPROG_CACHE) {
		devices_bpf_free(g->devprogs[0]);
		memmove(&g->devprogs[0], &g->devprogs[1],
			(DEVPROG_CACHE - 1) * sizeof(g->devprogs[0]));
		g->n_devprogs--;
	}
	g->devprogs[g->n_devprogs++] = d;
	*ret = d;
	return 0;
}

static bool gpus_on(struct agent *a)
{
	struct gpu_state *g = a->gpu;

	return g && gpu_enabled(g->inv);
}

/* Before fork: allocate, persistable form into t->gpu_alloc, extra env (NULL-terminated). */
static int gpu_glue_prepare(struct agent *a, struct task *t, char ***ret_env_extra, char *err,
			    size_t errlen)
{
	struct gpu_state *g = a->gpu;
	struct gpu_request req = {0};
	struct gpu_task *gt;
	char buf[64], list[GPU_UUID_LIST_MAX];
	char *env[2] = {NULL, NULL};
	size_t n_env = 0;
	int r;

	*ret_env_extra = NULL;
	if (t->spec.gpus == 0 && !t->spec.gpu_list && !t->spec.gpu_memory_max) {
		if (!gpus_on(a))
			return 0;
	} else if (!gpus_on(a)) {
		snprintf(err, errlen, "gpus: this node has no usable GPU (%s)",
			 g ? gpu_off_reason(g->inv) : "GPU support not initialised");
		return -ENODEV;
	}
	gt = calloc(1, sizeof(*gt));
	if (!gt)
		return -ENOMEM;
	snprintf(buf, sizeof(buf), "%u", t->spec.gpus);
	r = gpu_request_parse(t->spec.gpu_list ? t->spec.gpu_list : buf, &req);
	if (r < 0) {
		free(gt);
		snprintf(err, errlen, "gpus: invalid request \"%s\"",
			 t->spec.gpu_list ? t->spec.gpu_list : buf);
		return r;
	}
	r = gpu_alloc(g->inv, t->key, &req, &gt->alloc);
	if (r < 0) {
		free(gt);
		switch (r) {
		case -ENOSPC:
			snprintf(err, errlen,
				 "refused: %u GPU(s) requested, %u free of %zu on this node",
				 gpu_request_count(&req), gpu_free_count(g->inv),
				 gpu_count(g->inv));
			break;
		case -EBUSY:
			snprintf(err, errlen, "refused: GPU %s is allocated to another task",
				 t->spec.gpu_list);
			break;
		case -ENODEV:
			snprintf(err, errlen, "gpus: no such GPU \"%s\" (%zu on this node)",
				 t->spec.gpu_list ? t->spec.gpu_list : buf, gpu_count(g->inv));
			break;
		case -EOPNOTSUPP:
			snprintf(err, errlen,
				 "gpus: GPU %s has MIG enabled (not allocatable whole)",
				 t->spec.gpu_list);
			break;
		default:
			snprintf(err, errlen, "gpus: allocation failed: %s", strerror(-r));
		}
		return r;
	}
	if (gpu_allocation_format(g->inv, &gt->alloc, list, sizeof(list)) == 0) {
		json_decref(t->gpu_alloc);
		t->gpu_alloc = json_string(list);
	}
	if (gpu_env(g->inv, &gt->alloc, env, &n_env) == 0 && n_env == 2) {
		char **v = calloc(3, sizeof(char *));

		if (v) {
			v[0] = env[0];
			v[1] = env[1];
			*ret_env_extra = v;
		} else {
			free(env[0]);
			free(env[1]);
		}
	}
	t->gpu = gt;
	return 0;
}

/* The task's GPU device nodes for its private /dev: "nvidia0 nvidiactl nvidia-uvm ..." ("" with
 * no GPU). */
static void gpu_glue_dev_names(struct agent *a, struct task *t, char *buf, size_t len)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt = t->gpu;
	struct devices_policy p;
	size_t off = 0;

	if (len)
		buf[0] = 0;
	if (!gt || !gpus_on(a) || !gt->alloc.mask)
		return;
	devices_policy_init(&p, g->uvm_major);
	if (devices_policy_allow_gpus(&p, g->inv, &gt->alloc) < 0)
		return;
	for (unsigned m = 0; m <= DEVICES_GPU_MINOR_MAX; m++)
		if (devices_policy_allows(&p, 195, m) && off < len)
			off += (size_t)snprintf(buf + off, len - off, "nvidia%u ", m);
	if (off < len)
		snprintf(buf + off, len - off,
			 "nvidiactl nvidia-uvm nvidia-uvm-tools nvidia-modeset nvidia-caps");
}

/* Before fork, after the cgroup exists: device policy (v1 devices cgroup and/or BPF). */
static int gpu_glue_apply_devices(struct agent *a, struct task *t, char *err, size_t errlen)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt = t->gpu;
	struct devices_policy p;
	struct devices_prog *prog;
	int fd, r;

	if (!gt || !gpus_on(a))
		return 0;
	devices_policy_init(&p, g->uvm_major);
	r = devices_policy_allow_gpus(&p, g->inv, &gt->alloc);
	if (r < 0)
		return r;
	/*
	 * The cgroup_device program on the task's unified cgroup first: the kernel runs it before
	 * the v1 devices controller's check, on v2 and on a hybrid host alike, so where it is
	 * attached the v1 writes (one per denied GPU minor, ~250 per task) would only repeat it.
	 */
	fd = cg_task_unified_fd(t->cg);
	if (fd >= 0 && !g->devprog_load_err) {
		r = devprog_get(g, &p, &prog);
		if (r < 0 && cg_root_mode(a->cg) == CG_MODE_V1) {
			/* not loadable here: no point trying again for every task */
			g->devprog_load_err = r;
			log_notice("GPU device policy: the cgroup_device program cannot be loaded "
				   "(%s); the v1 devices cgroup enforces it alone",
				   strerror(-r));
		}
		if (r == 0)
			r = devices_bpf_attach_to(prog, fd);
		if (r == 0)
			return 0;
		if (cg_root_mode(a->cg) == CG_MODE_V2) {
			/* On v2 the BPF program is the only device policy: fail closed. */
			snprintf(err, errlen, "GPU device policy (cgroup_device BPF): %s",
				 strerror(-r));
			return r;
		}
	}
	if (cg_root_mode(a->cg) == CG_MODE_V1) {
		fd = cg_task_v1_dir_fd(t->cg, "devices");
		if (fd >= 0) {
			r = devices_v1_apply(fd, &p);
			if (r < 0) {
				snprintf(err, errlen, "devices cgroup: %s", strerror(-r));
				return r;
			}
			return 0;
		}
	}
	if (!g->no_policy_logged) {
		g->no_policy_logged = true;
		log_warning(
		    "GPU device policy unavailable (no cgroup_device program, no v1 devices "
		    "controller): tasks are not kept off the GPUs they were not given");
	}
	return 0;
}

/* A fresh meter from the task's start, as its wall time: gpu_seconds = GPUs x wall. */
static int meter_new(struct gpu_state *g, struct task *t, struct gpu_task *gt)
{
	return gpu_meter_new(g->inv, &gt->alloc, t->spec.gpu_memory_max,
			     t->start_ns ? t->start_ns : now_ns(CLOCK_REALTIME), &gt->meter);
}

static void gpu_glue_started(struct agent *a, struct task *t)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt = t->gpu;
	int r;

	if (!gt)
		return;
	if (g->cuda) {
		r = cuda_track(g->cuda, t->key, t->pid, t->spec.gpu_memory_max);
		gt->cuda_tracked = r == 0;
		if (r < 0)
			log_warning("task %s: GPU API telemetry unavailable: %s", t->id,
				    strerror(-r));
	}
	r = meter_new(g, t, gt);
	if (r < 0)
		log_warning("task %s: NVML metering unavailable: %s", t->id, strerror(-r));
}

static json_t *gpu_glue_state_json(struct agent *a, struct task *t)
{
	struct gpu_task *gt = t->gpu;
	struct gpu_meter_state s;
	json_t *j, *e;
	char k[16];

	(void)a;
	if (!gt || !gt->meter)
		return NULL;
	gpu_meter_get_state(gt->meter, &s);
	gt->peak_saved = s.mem_peak;
	e = json_object();
	for (size_t i = 0; e && s.energy_valid && i < GPU_MAX; i++)
		if (gt->alloc.mask & (1ULL << i)) {
			snprintf(k, sizeof(k), "%zu", i);
			json_object_set_new(e, k, json_integer((json_int_t)s.energy_start_mj[i]));
		}
	j = json_pack("{s:I,s:b,s:o*,s:I,s:f,s:I,s:b}", "start_ns", (json_int_t)s.start_ns,
		      "energy_valid", s.energy_valid, "energy_start_mj", e, "mem_peak",
		      (json_int_t)s.mem_peak, "util_sum", s.util_sum, "samples",
		      (json_int_t)s.samples, "limit_fired", s.limit_fired);
	return j;
}

/* The saved meter of an adopted task, or -EINVAL (older state file, or not ours). */
static int meter_state_from_json(const json_t *j, const struct gpu_allocation *alloc,
				 struct gpu_meter_state *s)
{
	const json_t *e = json_object_get(j, "energy_start_mj");

	if (!json_is_object(j) || !json_is_integer(json_object_get(j, "start_ns")) ||
	    json_integer_value(json_object_get(j, "start_ns")) <= 0)
		return -EINVAL;
	*s = (struct gpu_meter_state){
	    .start_ns = (uint64_t)json_integer_value(json_object_get(j, "start_ns")),
	    .energy_valid = json_is_true(json_object_get(j, "energy_valid")),
	    .mem_peak = (uint64_t)MAX(json_integer_value(json_object_get(j, "mem_peak")), 0),
	    .util_sum = MAX(json_number_value(json_object_get(j, "util_sum")), 0.0),
	    .samples = (uint64_t)MAX(json_integer_value(json_object_get(j, "samples")), 0),
	    .limit_fired = json_is_true(json_object_get(j, "limit_fired"))};
	for (size_t i = 0; s->energy_valid && i < GPU_MAX; i++) {
		char k[16];
		const json_t *v;

		if (!(alloc->mask & (1ULL << i)))
			continue;
		snprintf(k, sizeof(k), "%zu", i);
		v = json_object_get(e, k);
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			s->energy_valid = false;
		else
			s->energy_start_mj[i] = (unsigned long long)json_integer_value(v);
	}
	return 0;
}

/*
 * The part of the task's resident GPU memory (NVML, this tick) that its tracked allocations do
 * not explain: CUDA contexts, driver rounding, allocation paths without probes. The uprobe
 * limit counts it, so --gpu-memory limits one thing, resident memory, both ways.
 */
static void set_overhead(struct gpu_state *g, struct task *t, struct gpu_task *gt)
{
	struct gpu_usage u;
	struct cuda_usage cu;
	uint64_t over;
	int r;

	gpu_meter_usage(gt->meter, now_ns(CLOCK_REALTIME), &u);
	if (cuda_read(g->cuda, t->key, &cu) < 0)
		return;
	over = u.memory_current_bytes > cu.current_bytes ? u.memory_current_bytes - cu.current_bytes
							 : 0;
	r = cuda_set_overhead(g->cuda, t->key, over);
	if (r < 0)
		log_debug("task %s: GPU memory overhead not set: %s", t->id, strerror(-r));
}

/* true: the state file must be written (a new peak to keep). The NVML watchdog's verdict (the
 * sampled resident memory over --gpu-memory, once) waits for the limit op. */
static bool gpu_glue_tick(struct agent *a, struct task *t)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt = t->gpu;
	pid_t *pids = NULL;
	size_t n = 0;
	bool save = false;

	if (!gt || !gt->meter || !t->cg)
		return false;
	if (cg_task_pids(t->cg, &pids, &n) < 0)
		return false;
	if (gpu_meter_sample(g->inv, gt->meter, pids, n, now_ns(CLOCK_REALTIME)) == 1) {
		struct gpu_usage u;

		gpu_meter_usage(gt->meter, now_ns(CLOCK_REALTIME), &u);
		gt->over_seen = true;
		gt->over_observed = u.memory_current_bytes;
	} else {
		if (g->cuda && gt->cuda_tracked && t->spec.gpu_memory_max)
			set_overhead(g, t, gt);
		if (gpu_meter_peak(gt->meter) > gt->peak_saved)
			save = true; /* a restarted agent keeps the peak */
	}
	free(pids);
	return save;
}

/*
 * The GPU memory limit, seen by the NVML watchdog at a tick (resident memory over the limit) or
 * by the libcuda uprobe (an allocation that would cross it: the program killed the caller with
 * bpf_send_signal). Only read while no limit has fired: the first one is the task's.
 */
static bool gpu_limit(struct agent *a, struct task *t, struct meter_limit *ret)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt = t->gpu;
	struct cuda_usage cu;

	if (!gt || !t->spec.gpu_memory_max || t->limit_reason != ACCT_EXIT_NONE)
		return false;
	if (gt->over_seen) {
		*ret = (struct meter_limit){.why = ACCT_EXIT_GPU_MEMORY_LIMIT,
					    .limit = t->spec.gpu_memory_max,
					    .observed = gt->over_observed};
		return true;
	}
	if (g->cuda && gt->cuda_tracked && cuda_read(g->cuda, t->key, &cu) == 0 && cu.limit_fired) {
		*ret = (struct meter_limit){.why = ACCT_EXIT_GPU_MEMORY_LIMIT,
					    .limit = t->spec.gpu_memory_max,
					    .observed = cu.current_bytes + cu.killed_request_bytes};
		return true;
	}
	return false;
}

static void gpu_glue_usage(struct agent *a, struct task *t)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt = t->gpu;
	json_t *d;

	if (!gt)
		return;
	if (!t->usage_detail)
		t->usage_detail = json_object();
	d = t->usage_detail;
	if (gt->meter) {
		struct gpu_usage u;
		uint64_t now = t->end_ns ? t->end_ns : now_ns(CLOCK_REALTIME);

		gpu_meter_usage(gt->meter, now, &u);
		t->usage.gpu_seconds = u.gpu_seconds;
		t->usage.gpu_memory_peak_bytes = u.memory_peak_bytes;
		t->usage.gpu_util_avg = u.util_avg;
		t->sources[ACCT_U_GPU_SECONDS] = ACCT_SRC_NVML;
		t->sources[ACCT_U_GPU_MEMORY_PEAK_BYTES] = ACCT_SRC_NVML;
		t->sources[ACCT_U_GPU_UTIL_AVG] = ACCT_SRC_NVML;
		if (d && u.energy_valid)
			json_object_set_new(d, "gpu_energy_j", json_real(u.energy_j));
		t->energy.gpu_valid = u.energy_valid;
		t->energy.gpu_j = u.energy_valid ? u.energy_j : 0;
	}
	if (g->cuda && gt->cuda_tracked && d) {
		struct cuda_usage cu;

		if (cuda_read(g->cuda, t->key, &cu) == 0) {
			json_object_set_new(
			    d, "gpu_api",
			    json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b}", "source",
				      "ebpf uprobes on libcuda (API telemetry)", "alloc_bytes",
				      (json_int_t)cu.alloc_bytes, "alloc_calls",
				      (json_int_t)cu.alloc_calls, "peak_bytes",
				      (json_int_t)cu.peak_bytes, "launches",
				      (json_int_t)cu.launches, "memcpy_htod_bytes",
				      (json_int_t)cu.memcpy_htod_bytes, "memcpy_dtoh_bytes",
				      (json_int_t)cu.memcpy_dtoh_bytes, "untracked",
				      (json_int_t)cu.untracked, "limit_fired", cu.limit_fired));
		}
	}
}

void gpu_glue_release(struct agent *a, struct task *t)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt = t->gpu;

	if (!gt)
		return;
	if (g->cuda && gt->cuda_tracked)
		(void)cuda_forget(g->cuda, t->key);
	gpu_meter_free(gt->meter);
	(void)gpu_release(g->inv, t->key);
	free(gt);
	t->gpu = NULL;
}

/* A task freed with its GPUs still held (the agent stops while it runs: the next agent
 * re-adopts them from its state file): the meter's memory only, the inventory left alone. */
static void gpu_task_free(struct task *t)
{
	if (!t->gpu)
		return;
	gpu_meter_free(t->gpu->meter);
	free(t->gpu);
	t->gpu = NULL;
}

static void gpu_glue_adopt(struct agent *a, struct task *t)
{
	struct gpu_state *g = a->gpu;
	struct gpu_task *gt;
	struct gpu_meter_state s;
	int r;

	if (!gpus_on(a) || !json_is_string(t->gpu_alloc))
		return;
	gt = calloc(1, sizeof(*gt));
	if (!gt)
		return;
	r = gpu_adopt(g->inv, t->key, json_string_value(t->gpu_alloc), &gt->alloc);
	if (r < 0) {
		log_warning("task %s: could not re-adopt its GPUs %s: %s", t->id,
			    json_string_value(t->gpu_alloc), strerror(-r));
		free(gt);
		return;
	}
	/* Go on from the meter in the state file: GPU-seconds from the task's start, energy from
	 * the counters at its start, the peak so far. Without one (state written before it was
	 * kept), from the task's start; energy and peak then cover only the time since. */
	if (meter_state_from_json(t->gpu_meter_saved, &gt->alloc, &s) == 0)
		r = gpu_meter_resume(g->inv, &gt->alloc, t->spec.gpu_memory_max, &s, &gt->meter);
	else
		r = meter_new(g, t, gt);
	if (r < 0)
		log_warning("task %s: NVML metering unavailable: %s", t->id, strerror(-r));
	else
		gt->peak_saved = gpu_meter_peak(gt->meter);
	t->gpu = gt;
}

bool gpu_glue_stats(const struct agent *a, struct gpu_glue_stats *ret)
{
	const struct gpu_state *g = a->gpu;

	if (!g || !gpu_enabled(g->inv))
		return false;
	*ret = (struct gpu_glue_stats){
	    .gpus = gpu_count(g->inv),
	    .gpus_allocated = gpu_count(g->inv) - gpu_free_count(g->inv),
	    .api_uprobes = g->cuda != NULL,
	    .device_program_loads = g->devprog_loads,
	    .device_programs_cached = g->n_devprogs,
	};
	return true;
}

size_t gpu_glue_models(struct agent *a, const char **ret, size_t max)
{
	struct gpu_state *g = a->gpu;
	size_t n = 0;

	if (!g || !gpu_enabled(g->inv))
		return 0;
	for (size_t i = 0; i < gpu_count(g->inv) && n < max; i++) {
		const struct gpu_device *d = gpu_device(g->inv, i);

		if (d)
			ret[n++] = d->name;
	}
	return n;
}

/* ---- the GPU meter (agent/meters.h) -------------------------------------------------------- */

static int gpu_started(struct agent *a, struct task *t, char *err, size_t errlen)
{
	gpu_glue_started(a, t);
	return 0;
}

static void gpu_adopted(struct agent *a, struct task *t, bool live)
{
	gpu_glue_adopt(a, t);
}

static bool gpu_tick(struct agent *a, struct task *t, uint64_t now_mono)
{
	return gpu_glue_tick(a, t);
}

/* NVML is sampled at every tick (GPU memory limit, peak, utilization). */
static bool gpu_tick_every(const struct agent *a, const struct task *t)
{
	return t->gpu && t->gpu->meter;
}

static void gpu_usage(struct agent *a, struct task *t, struct meter_merge *m)
{
	gpu_glue_usage(a, t);
}

/* NVML's figures change unseen: a task with GPUs is never known unchanged. */
static bool gpu_unchanged(struct agent *a, struct task *t, uint64_t *rss_bytes)
{
	return !t->gpu && t->spec.gpus == 0;
}

/* The launch's GPUs: allocated (a request the node cannot meet refuses the task), the device
 * policy on the task's cgroup, their variables and device nodes for the plan. */
static int gpu_prepare(struct agent *a, struct task *t, struct meter_launch *ml, char *err,
		       size_t errlen)
{
	int r = gpu_glue_prepare(a, t, &ml->env, err, errlen);

	if (r < 0) {
		ml->refused = true;
		return r;
	}
	r = gpu_glue_apply_devices(a, t, err, errlen);
	if (r < 0) {
		gpu_glue_release(a, t);
		return r;
	}
	gpu_glue_dev_names(a, t, ml->dev_names, sizeof(ml->dev_names));
	return 0;
}

static void gpu_save(struct agent *a, struct task *t, json_t *state)
{
	json_t *v = gpu_glue_state_json(a, t);

	if (v)
		json_object_set_new(state, "gpu_meter", v);
}

const struct meter_ops meter_gpu_ops = {
    .name = "gpu",
    .prepare = gpu_prepare,
    .unprepare = gpu_glue_release,
    .started = gpu_started,
    .adopted = gpu_adopted,
    .tick = gpu_tick,
    .tick_every = gpu_tick_every,
    .usage = gpu_usage,
    .limit = gpu_limit,
    .unchanged = gpu_unchanged,
    .unchanged_fixed = true,
    .end = gpu_glue_release,
    .save = gpu_save,
    .release = gpu_task_free,
};

bool gpu_glue_task_energy_j(struct agent *a, struct task *t, double *ret,
			    unsigned long long ret_mj[GPU_MAX], uint64_t *ret_mask)
{
	struct gpu_state *g = a->gpu;
	struct gpu_usage u;

	if (!g || !t->gpu || !t->gpu->meter ||
	    gpu_meter_energy_refresh(g->inv, t->gpu->meter, ret_mj, ret_mask) < 0)
		return false;
	gpu_meter_usage(t->gpu->meter, now_ns(CLOCK_REALTIME), &u);
	if (!u.energy_valid)
		return false;
	*ret = u.energy_j;
	return true;
}

bool gpu_glue_energy_each_mj(struct agent *a, unsigned long long ret[GPU_MAX], size_t *ret_n)
{
	struct gpu_state *g = a->gpu;

	if (!g || !gpu_enabled(g->inv) || gpu_count(g->inv) == 0)
		return false;
	for (size_t i = 0; i < gpu_count(g->inv) && i < GPU_MAX; i++)
		if (gpu_device_energy_mj(g->inv, i, &ret[i]) < 0)
			return false;
	*ret_n = MIN(gpu_count(g->inv), (size_t)GPU_MAX);
	return true;
}

bool gpu_glue_energy_mj(struct agent *a, unsigned long long *ret)
{
	struct gpu_state *g = a->gpu;
	unsigned long long sum = 0, v;

	if (!g || !gpu_enabled(g->inv) || gpu_count(g->inv) == 0)
		return false;
	for (size_t i = 0; i < gpu_count(g->inv); i++) {
		if (gpu_device_energy_mj(g->inv, i, &v) < 0)
			return false;
		sum += v;
	}
	*ret = sum;
	return true;
}
