// SPDX-License-Identifier: MIT
/*
 * Stand-in libnvidia-ml.so.1 for tests on machines without a GPU. Exports the NVML symbols
 * isolation/gpu.c uses, with the real ABI (declared here independently of gpu.c, so a layout
 * mistake on either side shows up as a failing test). Devices and processes come from the
 * text fixture named by $CORRAL_FAKE_NVML, re-read on every call so a test can change it
 * between samples:
 *
 *   # comment
 *   init fail                  nvmlInit_v2 returns NVML_ERROR_DRIVER_NOT_LOADED
 *   device uuid=GPU-... name=NAME minor=N memory=BYTES mig=0|1 energy=MJ|none
 *   proc gpu=INDEX pid=PID mem=BYTES|na sm=PERCENT
 *
 * No $CORRAL_FAKE_NVML: nvmlInit_v2 fails with NVML_ERROR_DRIVER_NOT_LOADED.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS		     0
#define NVML_ERROR_UNINITIALIZED     1
#define NVML_ERROR_INVALID_ARGUMENT  2
#define NVML_ERROR_NOT_SUPPORTED     3
#define NVML_ERROR_NOT_FOUND	     6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_UNKNOWN	     999

typedef struct nvmlMemory_st {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct nvmlProcessInfo_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;
typedef struct nvmlProcessUtilizationSample_st {
	unsigned int pid;
	unsigned long long timeStamp;
	unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

#define MAXDEV	16
#define MAXPROC 64

struct fdev {
	char uuid[96], name[96];
	unsigned minor, mig;
	unsigned long long memory, energy;
	int energy_ok;
};
struct fproc {
	unsigned gpu, pid, sm;
	unsigned long long mem;
};
static struct {
	int init_fail;
	unsigned ndev, nproc;
	struct fdev dev[MAXDEV];
	struct fproc proc[MAXPROC];
} F;
static int initialised;
/* Handles are pointers into this array: opaque to the caller, as in the real library. */
static char handles[MAXDEV];

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t r);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *cur, unsigned int *pending);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
						     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
					     nvmlProcessUtilizationSample_t *util,
					     unsigned int *count, unsigned long long last_seen);
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *e);

static const char *field(const char *line, const char *key)
{
	size_t kl = strlen(key);
	for (const char *p = line; (p = strstr(p, key)); p++)
		if ((p == line || p[-1] == ' ' || p[-1] == '\t') && p[kl] == '=')
			return p + kl + 1;
	return NULL;
}

static void word(const char *v, char *dst, size_t len)
{
	size_t n = v ? strcspn(v, " \t\n") : 0;
	if (n >= len)
		n = len - 1;
	if (v)
		memcpy(dst, v, n);
	dst[n] = 0;
}

static unsigned long long num(const char *v)
{
	return v ? strtoull(v, NULL, 0) : 0;
}

static int load(void)
{
	const char *path = getenv("CORRAL_FAKE_NVML");
	char line[512];
	FILE *f;

	memset(&F, 0, sizeof(F));
	if (!path || !(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "init fail", 9) == 0) {
			F.init_fail = 1;
		} else if (strncmp(line, "device ", 7) == 0 && F.ndev < MAXDEV) {
			struct fdev *d = &F.dev[F.ndev++];
			const char *e = field(line, "energy");
			word(field(line, "uuid"), d->uuid, sizeof(d->uuid));
			word(field(line, "name"), d->name, sizeof(d->name));
			d->minor = (unsigned)num(field(line, "minor"));
			d->mig = (unsigned)num(field(line, "mig"));
			d->memory = num(field(line, "memory"));
			d->energy_ok = e && strncmp(e, "none", 4) != 0;
			d->energy = num(e);
		} else if (strncmp(line, "proc ", 5) == 0 && F.nproc < MAXPROC) {
			struct fproc *p = &F.proc[F.nproc++];
			const char *m = field(line, "mem");
			p->gpu = (unsigned)num(field(line, "gpu"));
			p->pid = (unsigned)num(field(line, "pid"));
			p->sm = (unsigned)num(field(line, "sm"));
			p->mem = m && strncmp(m, "na", 2) == 0 ? ~0ULL : num(m);
		}
	}
	fclose(f);
	return 0;
}

static int dev_index(nvmlDevice_t d)
{
	long i = (char *)d - handles;
	if (!initialised || i < 0 || i >= (long)F.ndev)
		return -1;
	return (int)i;
}

nvmlReturn_t nvmlInit_v2(void)
{
	if (load() < 0 || F.init_fail)
		return NVML_ERROR_DRIVER_NOT_LOADED;
	initialised = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	initialised = 0;
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	default:
		return "Unknown Error";
	}
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	load();
	*count = F.ndev;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialised)
		return NVML_ERROR_UNINITIALIZED;
	if (index >= F.ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = (nvmlDevice_t)(void *)&handles[index];
	return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(const char *s, char *dst, unsigned int len)
{
	if (strlen(s) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	int i = dev_index(device);
	return i < 0 ? NVML_ERROR_INVALID_ARGUMENT : copy_str(F.dev[i].uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	int i = dev_index(device);
	return i < 0 ? NVML_ERROR_INVALID_ARGUMENT : copy_str(F.dev[i].name, name, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	int i = dev_index(device);
	unsigned long long used = 0;
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	load();
	for (unsigned p = 0; p < F.nproc; p++)
		if (F.proc[p].gpu == (unsigned)i && F.proc[p].mem != ~0ULL)
			used += F.proc[p].mem;
	memory->total = F.dev[i].memory;
	memory->used = used;
	memory->free = used < memory->total ? memory->total - used : 0;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor)
{
	int i = dev_index(device);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	*minor = F.dev[i].minor;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *cur, unsigned int *pending)
{
	int i = dev_index(device);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	*cur = *pending = F.dev[i].mig;
	return NVML_SUCCESS;
}

/* Real semantics: *count in = capacity, out = number of processes; too small (or infos NULL
 * with processes present) -> NVML_ERROR_INSUFFICIENT_SIZE with *count = the number needed. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
						     nvmlProcessInfo_t *infos)
{
	int i = dev_index(device);
	unsigned n = 0, cap;
	if (i < 0 || !count)
		return NVML_ERROR_INVALID_ARGUMENT;
	load();
	cap = infos ? *count : 0;
	for (unsigned p = 0; p < F.nproc; p++) {
		if (F.proc[p].gpu != (unsigned)i)
			continue;
		if (n < cap)
			infos[n] = (nvmlProcessInfo_t){.pid = F.proc[p].pid,
						       .usedGpuMemory = F.proc[p].mem,
						       .gpuInstanceId = 0xFFFFFFFF,
						       .computeInstanceId = 0xFFFFFFFF};
		n++;
	}
	*count = n;
	return n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
					     nvmlProcessUtilizationSample_t *util,
					     unsigned int *count, unsigned long long last_seen)
{
	int i = dev_index(device);
	unsigned n = 0, cap;
	struct timespec ts;
	unsigned long long now;
	if (i < 0 || !count)
		return NVML_ERROR_INVALID_ARGUMENT;
	load();
	clock_gettime(CLOCK_REALTIME, &ts);
	now = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
	if (now <= last_seen)
		now = last_seen + 1; /* every call yields a fresh sample */
	cap = util ? *count : 0;
	for (unsigned p = 0; p < F.nproc; p++) {
		if (F.proc[p].gpu != (unsigned)i)
			continue;
		if (n < cap)
			util[n] = (nvmlProcessUtilizationSample_t){
			    .pid = F.proc[p].pid, .timeStamp = now, .smUtil = F.proc[p].sm};
		n++;
	}
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	*count = n;
	return n > cap ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *e)
{
	int i = dev_index(device);
	if (i < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	load();
	if (!F.dev[i].energy_ok)
		return NVML_ERROR_NOT_SUPPORTED;
	*e = F.dev[i].energy;
	return NVML_SUCCESS;
}
