// SPDX-License-Identifier: MIT
/*
 * NVML inventory, GPU allocator, task environment and per-task NVML sampling. See gpu.h and
 * docs/gpu.md.
 *
 * NVML is declared here rather than taken from a header package: only the calls below are
 * used, each with the ABI of nvml.h as shipped with CUDA 11.6 and later (driver R510+):
 *   nvmlMemory_t                    v1: {total, free, used} unsigned long long, 24 bytes
 *   nvmlProcessInfo_t               the struct of nvmlDeviceGetComputeRunningProcesses_v3
 *                                   (same layout as nvmlProcessInfo_v2_t): {unsigned pid;
 *                                   unsigned long long usedGpuMemory; unsigned gpuInstanceId;
 *                                   unsigned computeInstanceId}, 24 bytes on LP64
 *   nvmlProcessInfo_v1_t            {unsigned pid; unsigned long long usedGpuMemory}, 16 bytes,
 *                                   used only with the unversioned call on drivers without _v3
 *   nvmlProcessUtilizationSample_t  {unsigned pid; unsigned long long timeStamp (us);
 *                                   unsigned smUtil, memUtil, encUtil, decUtil}, 32 bytes
 * The static asserts below pin those sizes.
 */
#include "isolation/gpu.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/macro.h"
#include "common/clock.h"
#include "common/parse.h"

/* ---- NVML declarations ------------------------------------------------------------------ */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS		     0
#define NVML_ERROR_NOT_SUPPORTED     3
#define NVML_ERROR_NOT_FOUND	     6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_DEVICE_MIG_ENABLE	     1
/* usedGpuMemory when the driver cannot tell (e.g. insufficient permissions) */
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
	unsigned int pid;
	unsigned long long timeStamp;
	unsigned int smUtil;
	unsigned int memUtil;
	unsigned int encUtil;
	unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t v1 ABI");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t (v2/v3 call) ABI");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t ABI");
_Static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32, "nvmlProcessUtilizationSample_t ABI");

struct nvml_api {
	nvmlReturn_t (*init_v2)(void);
	nvmlReturn_t (*shutdown)(void);
	const char *(*error_string)(nvmlReturn_t);
	nvmlReturn_t (*get_count_v2)(unsigned int *);
	nvmlReturn_t (*get_handle_by_index_v2)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*get_uuid)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*get_name)(nvmlDevice_t, char *, unsigned int);
	nvmlReturn_t (*get_memory_info)(nvmlDevice_t, nvmlMemory_t *);
	nvmlReturn_t (*get_minor_number)(nvmlDevice_t, unsigned int *);
	/* optional below */
	nvmlReturn_t (*get_mig_mode)(nvmlDevice_t, unsigned int *, unsigned int *);
	nvmlReturn_t (*get_compute_procs_v3)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
	nvmlReturn_t (*get_compute_procs_v1)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
	nvmlReturn_t (*get_process_utilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t *,
						unsigned int *, unsigned long long);
	nvmlReturn_t (*get_total_energy)(nvmlDevice_t, unsigned long long *);
};

/* ---- inventory ------------------------------------------------------------------------- */

struct gpu_inventory {
	void *dl;
	bool initialised; /* nvmlInit_v2 succeeded: nvmlShutdown on free */
	struct nvml_api api;
	char off_reason[256];
	bool enabled;
	size_t n;
	struct gpu_device dev[GPU_MAX];
	nvmlDevice_t handle[GPU_MAX];
	bool owned[GPU_MAX];
	uint64_t owner[GPU_MAX];
};

static const char *nvml_strerror(const struct gpu_inventory *inv, nvmlReturn_t r)
{
	const char *s = inv->api.error_string ? inv->api.error_string(r) : NULL;
	return s ? s : "unknown NVML error";
}

/* Turn the inventory off with a reason; drops the library. */
_printf_(2, 3) static void inventory_off(struct gpu_inventory *inv, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(inv->off_reason, sizeof(inv->off_reason), fmt, ap);
	va_end(ap);
	if (inv->initialised && inv->api.shutdown)
		inv->api.shutdown();
	inv->initialised = false;
	if (inv->dl)
		dlclose(inv->dl);
	inv->dl = NULL;
	memset(&inv->api, 0, sizeof(inv->api));
	inv->enabled = false;
	inv->n = 0;
}

static void *sym(void *dl, const char *name)
{
	return dlsym(dl, name);
}

/* Resolve the required calls; returns the name of the first missing one, or NULL. */
static const char *resolve_api(struct gpu_inventory *inv)
{
	struct nvml_api *a = &inv->api;
	void *dl = inv->dl;

#define REQ(field, name)                                                                           \
	do {                                                                                       \
		*(void **)&a->field = sym(dl, name);                                               \
		if (!a->field)                                                                     \
			return name;                                                               \
	} while (0)
	REQ(init_v2, "nvmlInit_v2");
	REQ(shutdown, "nvmlShutdown");
	REQ(error_string, "nvmlErrorString");
	REQ(get_count_v2, "nvmlDeviceGetCount_v2");
	REQ(get_handle_by_index_v2, "nvmlDeviceGetHandleByIndex_v2");
	REQ(get_uuid, "nvmlDeviceGetUUID");
	REQ(get_name, "nvmlDeviceGetName");
	REQ(get_memory_info, "nvmlDeviceGetMemoryInfo");
	REQ(get_minor_number, "nvmlDeviceGetMinorNumber");
#undef REQ
	*(void **)&a->get_mig_mode = sym(dl, "nvmlDeviceGetMigMode");
	*(void **)&a->get_compute_procs_v3 = sym(dl, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (!a->get_compute_procs_v3)
		*(void **)&a->get_compute_procs_v1 =
		    sym(dl, "nvmlDeviceGetComputeRunningProcesses");
	*(void **)&a->get_process_utilization = sym(dl, "nvmlDeviceGetProcessUtilization");
	*(void **)&a->get_total_energy = sym(dl, "nvmlDeviceGetTotalEnergyConsumption");
	return NULL;
}

static void copy_cstr(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src);
}

int gpu_open(const struct gpu_opts *opts, struct gpu_inventory **ret)
{
	_cleanup_free_ struct gpu_inventory *inv = calloc(1, sizeof(*inv));
	const char *path = opts ? opts->library_path : NULL;
	const char *missing;
	unsigned int count = 0;
	nvmlReturn_t r;

	if (!inv)
		return -ENOMEM;
	if (!path)
		path = secure_getenv("CORRAL_NVML_LIBRARY");
	if (!path || !*path)
		path = "libnvidia-ml.so.1";

	inv->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!inv->dl) {
		const char *e = dlerror();
		inventory_off(inv, "%s", e ? e : path);
		goto out;
	}
	missing = resolve_api(inv);
	if (missing) {
		inventory_off(inv, "%s: symbol %s missing", path, missing);
		goto out;
	}
	r = inv->api.init_v2();
	if (r != NVML_SUCCESS) {
		inventory_off(inv, "nvmlInit_v2: %s", nvml_strerror(inv, r));
		goto out;
	}
	inv->initialised = true;
	r = inv->api.get_count_v2(&count);
	if (r != NVML_SUCCESS) {
		inventory_off(inv, "nvmlDeviceGetCount_v2: %s", nvml_strerror(inv, r));
		goto out;
	}
	if (count == 0) {
		inventory_off(inv, "no GPU reported by NVML");
		goto out;
	}
	if (count > GPU_MAX)
		count = GPU_MAX; /* devices beyond are ignored (documented limit) */

	for (unsigned i = 0; i < count; i++) {
		struct gpu_device *d = &inv->dev[i];
		nvmlDevice_t h;
		nvmlMemory_t mem;
		unsigned int minor, cur, pending;
		unsigned long long energy;
		char buf[GPU_UUID_MAX];

		r = inv->api.get_handle_by_index_v2(i, &h);
		if (r == NVML_SUCCESS) {
			memset(buf, 0, sizeof(buf));
			r = inv->api.get_uuid(h, buf, sizeof(buf));
			buf[sizeof(buf) - 1] = 0;
			copy_cstr(d->uuid, sizeof(d->uuid), buf);
		}
		if (r == NVML_SUCCESS) {
			memset(buf, 0, sizeof(buf));
			r = inv->api.get_name(h, buf, sizeof(buf));
			buf[sizeof(buf) - 1] = 0;
			copy_cstr(d->name, sizeof(d->name), buf);
		}
		if (r == NVML_SUCCESS)
			r = inv->api.get_memory_info(h, &mem);
		if (r == NVML_SUCCESS)
			r = inv->api.get_minor_number(h, &minor);
		if (r != NVML_SUCCESS) {
			inventory_off(inv, "GPU %u: %s", i, nvml_strerror(inv, r));
			goto out;
		}
		if (!d->uuid[0] || minor > 253) {
			inventory_off(inv, "GPU %u: no UUID or minor %u out of range", i, minor);
			goto out;
		}
		d->index = i;
		d->memory_total = mem.total;
		d->minor = minor;
		d->mig_enabled = inv->api.get_mig_mode &&
				 inv->api.get_mig_mode(h, &cur, &pending) == NVML_SUCCESS &&
				 cur == NVML_DEVICE_MIG_ENABLE;
		d->energy_supported = inv->api.get_total_energy &&
				      inv->api.get_total_energy(h, &energy) == NVML_SUCCESS;
		inv->handle[i] = h;
	}
	inv->n = count;
	inv->enabled = true;
out:
	*ret = TAKE_PTR(inv);
	return 0;
}

void gpu_free(struct gpu_inventory *inv)
{
	if (!inv)
		return;
	if (inv->initialised && inv->api.shutdown)
		inv->api.shutdown();
	if (inv->dl)
		dlclose(inv->dl);
	free(inv);
}

bool gpu_enabled(const struct gpu_inventory *inv)
{
	return inv && inv->enabled;
}

const char *gpu_off_reason(const struct gpu_inventory *inv)
{
	if (!inv)
		return "no inventory";
	return inv->enabled ? NULL : inv->off_reason;
}

size_t gpu_count(const struct gpu_inventory *inv)
{
	return inv ? inv->n : 0;
}

const struct gpu_device *gpu_device(const struct gpu_inventory *inv, size_t i)
{
	return inv && i < inv->n ? &inv->dev[i] : NULL;
}

int gpu_find_uuid(const struct gpu_inventory *inv, const char *uuid)
{
	for (size_t i = 0; inv && i < inv->n; i++)
		if (strcmp(inv->dev[i].uuid, uuid) == 0)
			return (int)i;
	return -ENOENT;
}

/* ---- allocation ------------------------------------------------------------------------ */

int gpu_request_parse(const char *s, struct gpu_request *ret)
{
	struct gpu_request req = {};
	const char *p = s;
	int r;

	if (!s || !*s)
		return -EINVAL;
	if (!strchr(s, ',')) {
		uint32_t n;
		r = parse_u32(s, &n);
		if (r < 0)
			return r;
		if (n > GPU_MAX)
			return -ERANGE;
		req.count = n;
		*ret = req;
		return 0;
	}
	req.by_index = true;
	while (*p) {
		char item[DECIMAL_STR_MAX(uint32_t)];
		size_t len = strcspn(p, ",");
		uint32_t idx;

		if (len == 0 || len >= sizeof(item))
			return -EINVAL;
		memcpy(item, p, len);
		item[len] = 0;
		r = parse_u32(item, &idx);
		if (r < 0)
			return r;
		if (idx >= GPU_MAX)
			return -ERANGE;
		if (req.index_mask & (1ULL << idx))
			return -EINVAL; /* duplicate */
		req.index_mask |= 1ULL << idx;
		p += len;
		if (*p == ',') {
			p++;
			if (!*p)
				return -EINVAL; /* trailing comma */
		}
	}
	*ret = req;
	return 0;
}

unsigned gpu_request_count(const struct gpu_request *req)
{
	return req->by_index ? (unsigned)__builtin_popcountll(req->index_mask) : req->count;
}

unsigned gpu_allocation_count(const struct gpu_allocation *a)
{
	return (unsigned)__builtin_popcountll(a->mask);
}

static bool allocatable(const struct gpu_inventory *inv, size_t i)
{
	return !inv->owned[i] && !inv->dev[i].mig_enabled;
}

static bool task_holds_any(const struct gpu_inventory *inv, uint64_t task_key)
{
	for (size_t i = 0; i < inv->n; i++)
		if (inv->owned[i] && inv->owner[i] == task_key)
			return true;
	return false;
}

int gpu_alloc(struct gpu_inventory *inv, uint64_t task_key, const struct gpu_request *req,
	      struct gpu_allocation *ret)
{
	uint64_t mask = 0;
	unsigned want = gpu_request_count(req);

	if (want == 0) {
		*ret = (struct gpu_allocation){};
		return 0;
	}
	if (!gpu_enabled(inv))
		return -ENODEV;
	if (task_holds_any(inv, task_key))
		return -EEXIST;
	if (req->by_index) {
		if (inv->n < 64 && (req->index_mask >> inv->n))
			return -ENODEV; /* checked first: a missing GPU is the operator's typo */
		for (unsigned i = 0; i < inv->n; i++) {
			if (!(req->index_mask & (1ULL << i)))
				continue;
			if (inv->dev[i].mig_enabled)
				return -EOPNOTSUPP;
			if (inv->owned[i])
				return -EBUSY;
		}
		mask = req->index_mask;
	} else {
		unsigned got = 0;
		for (size_t i = 0; i < inv->n && got < want; i++) {
			if (allocatable(inv, i)) {
				mask |= 1ULL << i;
				got++;
			}
		}
		if (got < want)
			return -ENOSPC;
	}
	for (size_t i = 0; i < inv->n; i++) {
		if (mask & (1ULL << i)) {
			inv->owned[i] = true;
			inv->owner[i] = task_key;
		}
	}
	ret->mask = mask;
	return 0;
}

int gpu_release(struct gpu_inventory *inv, uint64_t task_key)
{
	for (size_t i = 0; inv && i < inv->n; i++)
		if (inv->owned[i] && inv->owner[i] == task_key)
			inv->owned[i] = false;
	return 0;
}

unsigned gpu_free_count(const struct gpu_inventory *inv)
{
	unsigned n = 0;
	for (size_t i = 0; inv && i < inv->n; i++)
		n += allocatable(inv, i);
	return n;
}

void gpu_task_allocation(const struct gpu_inventory *inv, uint64_t task_key,
			 struct gpu_allocation *ret)
{
	ret->mask = 0;
	for (size_t i = 0; inv && i < inv->n; i++)
		if (inv->owned[i] && inv->owner[i] == task_key)
			ret->mask |= 1ULL << i;
}

int gpu_allocation_format(const struct gpu_inventory *inv, const struct gpu_allocation *a,
			  char *buf, size_t len)
{
	size_t off = 0;

	if (len == 0)
		return -ENOBUFS;
	buf[0] = 0;
	for (size_t i = 0; i < GPU_MAX; i++) {
		int n;
		if (!(a->mask & (1ULL << i)))
			continue;
		if (!inv || i >= inv->n)
			return -ENODEV;
		n = snprintf(buf + off, len - off, "%s%s", off ? "," : "", inv->dev[i].uuid);
		if (n < 0 || (size_t)n >= len - off)
			return -ENOBUFS;
		off += (size_t)n;
	}
	return 0;
}

int gpu_adopt(struct gpu_inventory *inv, uint64_t task_key, const char *persisted,
	      struct gpu_allocation *ret)
{
	uint64_t mask = 0;
	const char *p = persisted;

	if (!persisted)
		return -EINVAL;
	if (!*persisted) {
		ret->mask = 0;
		return 0;
	}
	if (!gpu_enabled(inv))
		return -ENODEV;
	while (*p) {
		char uuid[GPU_UUID_MAX];
		size_t len = strcspn(p, ",");
		int i;

		if (len == 0 || len >= sizeof(uuid))
			return -EINVAL;
		memcpy(uuid, p, len);
		uuid[len] = 0;
		i = gpu_find_uuid(inv, uuid);
		if (i < 0)
			return -ENODEV;
		if (inv->owned[i] && inv->owner[i] != task_key)
			return -EBUSY;
		mask |= 1ULL << i;
		p += len;
		if (*p == ',' && !*++p)
			return -EINVAL;
	}
	for (size_t i = 0; i < inv->n; i++) {
		if (mask & (1ULL << i)) {
			inv->owned[i] = true;
			inv->owner[i] = task_key;
		}
	}
	ret->mask = mask;
	return 0;
}

int gpu_env(const struct gpu_inventory *inv, const struct gpu_allocation *a, char *ret[2],
	    size_t *ret_n)
{
	_cleanup_free_ char *list = NULL, *cuda = NULL, *nv = NULL;
	int r;

	if (!gpu_enabled(inv)) {
		*ret_n = 0;
		return 0;
	}
	list = malloc(GPU_UUID_LIST_MAX);
	if (!list)
		return -ENOMEM;
	r = gpu_allocation_format(inv, a, list, GPU_UUID_LIST_MAX);
	if (r < 0)
		return r;
	if (asprintf(&cuda, "CUDA_VISIBLE_DEVICES=%s", list) < 0) {
		cuda = NULL;
		return -ENOMEM;
	}
	if (asprintf(&nv, "NVIDIA_VISIBLE_DEVICES=%s", list[0] ? list : "void") < 0) {
		nv = NULL;
		return -ENOMEM;
	}
	ret[0] = TAKE_PTR(cuda);
	ret[1] = TAKE_PTR(nv);
	*ret_n = 2;
	return 0;
}

/* ---- per-task sampling ----------------------------------------------------------------- */

struct gpu_meter {
	struct gpu_allocation alloc;
	uint64_t memory_limit;
	uint64_t start_ns;
	unsigned long long energy_start_mj[GPU_MAX];
	unsigned long long energy_last_mj[GPU_MAX];
	unsigned long long util_last_seen_us[GPU_MAX];
	bool energy_valid;
	bool limit_fired;
	uint64_t mem_current, mem_peak;
	double util_sum;
	uint64_t samples;
};

int gpu_meter_new(struct gpu_inventory *inv, const struct gpu_allocation *a, uint64_t memory_limit,
		  uint64_t start_ns, struct gpu_meter **ret)
{
	struct gpu_meter *m;

	if (a->mask && (!gpu_enabled(inv) || (inv->n < 64 && (a->mask >> inv->n))))
		return -ENODEV;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->alloc = *a;
	m->memory_limit = memory_limit;
	m->start_ns = start_ns;
	m->energy_valid = a->mask != 0;
	for (size_t i = 0; a->mask && i < inv->n; i++) {
		if (!(a->mask & (1ULL << i)))
			continue;
		if (!inv->dev[i].energy_supported ||
		    inv->api.get_total_energy(inv->handle[i], &m->energy_start_mj[i]) !=
			NVML_SUCCESS) {
			m->energy_valid = false;
			continue;
		}
		m->energy_last_mj[i] = m->energy_start_mj[i];
	}
	*ret = m;
	return 0;
}

void gpu_meter_free(struct gpu_meter *m)
{
	free(m);
}

uint64_t gpu_meter_peak(const struct gpu_meter *m)
{
	return m->mem_peak;
}

void gpu_meter_get_state(const struct gpu_meter *m, struct gpu_meter_state *ret)
{
	*ret = (struct gpu_meter_state){.start_ns = m->start_ns,
					.energy_valid = m->energy_valid,
					.mem_peak = m->mem_peak,
					.util_sum = m->util_sum,
					.samples = m->samples,
					.limit_fired = m->limit_fired};
	memcpy(ret->energy_start_mj, m->energy_start_mj, sizeof(ret->energy_start_mj));
}

int gpu_meter_resume(struct gpu_inventory *inv, const struct gpu_allocation *a,
		     uint64_t memory_limit, const struct gpu_meter_state *s, struct gpu_meter **ret)
{
	struct gpu_meter *m;
	int r = gpu_meter_new(inv, a, memory_limit, s->start_ns, &m);

	if (r < 0)
		return r;
	/* gpu_meter_new read each counter now: that is the latest value, the start is saved */
	m->energy_valid = m->energy_valid && s->energy_valid;
	for (size_t i = 0; m->energy_valid && i < GPU_MAX; i++) {
		if (!(a->mask & (1ULL << i)))
			continue;
		if (m->energy_start_mj[i] < s->energy_start_mj[i])
			m->energy_valid = false; /* went backwards: the driver was reloaded */
		m->energy_start_mj[i] = s->energy_start_mj[i];
	}
	m->mem_peak = s->mem_peak;
	m->util_sum = s->util_sum;
	m->samples = s->samples;
	m->limit_fired = s->limit_fired;
	*ret = m;
	return 0;
}

static bool pid_in(pid_t pid, const pid_t *pids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (pids[i] == pid)
			return true;
	return false;
}

/* Sum of usedGpuMemory of pids on one device. */
static int device_memory(struct gpu_inventory *inv, nvmlDevice_t h, const pid_t *pids, size_t n,
			 uint64_t *ret)
{
	_cleanup_free_ void *buf = NULL;
	unsigned int count = 0, cap;
	uint64_t sum = 0;
	bool v3 = inv->api.get_compute_procs_v3 != NULL;
	size_t esize = v3 ? sizeof(nvmlProcessInfo_t) : sizeof(nvmlProcessInfo_v1_t);
	nvmlReturn_t r;

	if (!v3 && !inv->api.get_compute_procs_v1)
		return -EOPNOTSUPP;
	/* Size query, then fetch with headroom: processes may start between the two calls. */
	r = v3 ? inv->api.get_compute_procs_v3(h, &count, NULL)
	       : inv->api.get_compute_procs_v1(h, &count, NULL);
	if (r == NVML_SUCCESS && count == 0) {
		*ret = 0;
		return 0;
	}
	if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE)
		return -EIO;
	if (count > GPU_PIDS_MAX)
		count = GPU_PIDS_MAX;
	cap = count + 16;
	buf = calloc(cap, esize);
	if (!buf)
		return -ENOMEM;
	count = cap;
	r = v3 ? inv->api.get_compute_procs_v3(h, &count, buf)
	       : inv->api.get_compute_procs_v1(h, &count, buf);
	if (r != NVML_SUCCESS)
		return -EIO;
	for (unsigned i = 0; i < count && i < cap; i++) {
		unsigned int pid;
		unsigned long long used;
		if (v3) {
			pid = ((nvmlProcessInfo_t *)buf)[i].pid;
			used = ((nvmlProcessInfo_t *)buf)[i].usedGpuMemory;
		} else {
			pid = ((nvmlProcessInfo_v1_t *)buf)[i].pid;
			used = ((nvmlProcessInfo_v1_t *)buf)[i].usedGpuMemory;
		}
		if (used == NVML_VALUE_NOT_AVAILABLE || !pid_in((pid_t)pid, pids, n))
			continue;
		sum += used;
	}
	*ret = sum;
	return 0;
}

/* SM utilization (percent, capped at 100) of pids on one device since the last sample. */
static int device_util(struct gpu_inventory *inv, nvmlDevice_t h, unsigned long long *last_seen,
		       const pid_t *pids, size_t n, unsigned *ret)
{
	_cleanup_free_ nvmlProcessUtilizationSample_t *buf = NULL;
	unsigned int count = 0, cap;
	unsigned long long newest = *last_seen;
	unsigned sum = 0;
	nvmlReturn_t r;

	if (!inv->api.get_process_utilization)
		return -EOPNOTSUPP;
	r = inv->api.get_process_utilization(h, NULL, &count, *last_seen);
	if (r == NVML_ERROR_NOT_FOUND || (r == NVML_SUCCESS && count == 0)) {
		*ret = 0; /* no sample since last_seen: idle */
		return 0;
	}
	if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE)
		return r == NVML_ERROR_NOT_SUPPORTED ? -EOPNOTSUPP : -EIO;
	if (count > GPU_PIDS_MAX)
		count = GPU_PIDS_MAX;
	cap = count + 16;
	buf = calloc(cap, sizeof(*buf));
	if (!buf)
		return -ENOMEM;
	count = cap;
	r = inv->api.get_process_utilization(h, buf, &count, *last_seen);
	if (r == NVML_ERROR_NOT_FOUND) {
		*ret = 0;
		return 0;
	}
	if (r != NVML_SUCCESS)
		return -EIO;
	for (unsigned i = 0; i < count && i < cap; i++) {
		if (buf[i].timeStamp > newest)
			newest = buf[i].timeStamp;
		if (pid_in((pid_t)buf[i].pid, pids, n))
			sum += buf[i].smUtil;
	}
	*last_seen = newest;
	*ret = MIN(sum, 100u);
	return 0;
}

int gpu_meter_sample(struct gpu_inventory *inv, struct gpu_meter *m, const pid_t *pids, size_t n,
		     uint64_t now_ns)
{
	uint64_t mem_total = 0;
	unsigned util_total = 0, ndev = 0;
	bool util_ok = true;
	int r;

	if (!m->alloc.mask)
		return 0;
	if (!gpu_enabled(inv))
		return -ENODEV;
	if (n > GPU_PIDS_MAX)
		n = GPU_PIDS_MAX;
	for (size_t i = 0; i < inv->n; i++) {
		uint64_t mem;
		unsigned util = 0;
		unsigned long long e;

		if (!(m->alloc.mask & (1ULL << i)))
			continue;
		ndev++;
		r = device_memory(inv, inv->handle[i], pids, n, &mem);
		if (r < 0)
			return r;
		mem_total += mem;
		if (util_ok &&
		    device_util(inv, inv->handle[i], &m->util_last_seen_us[i], pids, n, &util) < 0)
			util_ok = false;
		util_total += util;
		if (m->energy_valid &&
		    inv->api.get_total_energy(inv->handle[i], &e) == NVML_SUCCESS &&
		    e >= m->energy_start_mj[i])
			m->energy_last_mj[i] = e;
	}
	m->mem_current = mem_total;
	m->mem_peak = MAX(m->mem_peak, mem_total);
	if (util_ok && ndev) {
		m->util_sum += (double)util_total / ndev;
		m->samples++;
	}
	if (m->memory_limit && mem_total > m->memory_limit && !m->limit_fired) {
		m->limit_fired = true;
		return 1;
	}
	(void)now_ns;
	return 0;
}

int gpu_meter_energy_refresh(struct gpu_inventory *inv, struct gpu_meter *m,
			     unsigned long long ret_mj[GPU_MAX], uint64_t *ret_mask)
{
	unsigned long long e;

	if (!m->alloc.mask || !m->energy_valid)
		return -ENODATA;
	if (!gpu_enabled(inv))
		return -ENODEV;
	for (size_t i = 0; i < inv->n && i < GPU_MAX; i++) {
		if (!(m->alloc.mask & (1ULL << i)))
			continue;
		if (inv->api.get_total_energy(inv->handle[i], &e) != NVML_SUCCESS)
			return -EIO;
		if (e >= m->energy_last_mj[i])
			m->energy_last_mj[i] = e;
		ret_mj[i] = m->energy_last_mj[i];
	}
	*ret_mask = m->alloc.mask;
	return 0;
}

void gpu_meter_usage(const struct gpu_meter *m, uint64_t now_ns, struct gpu_usage *ret)
{
	double energy_mj = 0;

	*ret = (struct gpu_usage){};
	if (now_ns > m->start_ns)
		ret->gpu_seconds = (double)gpu_allocation_count(&m->alloc) *
				   (double)(now_ns - m->start_ns) / (double)NSEC_PER_SEC;
	ret->memory_current_bytes = m->mem_current;
	ret->memory_peak_bytes = m->mem_peak;
	ret->samples = m->samples;
	ret->util_avg = m->samples ? m->util_sum / (double)m->samples : 0;
	ret->energy_valid = m->energy_valid;
	for (size_t i = 0; m->energy_valid && i < GPU_MAX; i++)
		if (m->alloc.mask & (1ULL << i))
			energy_mj += (double)(m->energy_last_mj[i] - m->energy_start_mj[i]);
	ret->energy_j = m->energy_valid ? energy_mj / 1000.0 : 0;
	ret->memory_limit_exceeded = m->limit_fired;
}

int gpu_device_energy_mj(const struct gpu_inventory *inv, size_t i, unsigned long long *ret)
{
	if (!inv || !inv->enabled || i >= inv->n || !inv->dev[i].energy_supported)
		return -EOPNOTSUPP;
	return inv->api.get_total_energy(inv->handle[i], ret) == NVML_SUCCESS ? 0 : -EIO;
}
