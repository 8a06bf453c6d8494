// SPDX-License-Identifier: MIT
/* NVIDIA device-node policy per task: v1 devices cgroup writes or a cgroup_device program. */
#include "isolation/devices.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bpf/devices_types.h"
#include "common/macro.h"
#include "common/fileio.h"
#include "common/parse.h"

#define PROC_DEVICES_MAX (64 * 1024)

int devices_read_uvm_major(const char *proc_devices, unsigned *ret_uvm)
{
	_cleanup_free_ char *buf = NULL;
	bool chr = false;
	char *line, *save = NULL;
	unsigned uvm = 0;
	int r;

	r = read_file(proc_devices ? proc_devices : "/proc/devices", PROC_DEVICES_MAX, &buf, NULL);
	if (r < 0)
		return r;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[64], num[DECIMAL_STR_MAX(uint32_t)];
		uint32_t major;

		if (strcmp(line, "Character devices:") == 0) {
			chr = true;
			continue;
		}
		if (strcmp(line, "Block devices:") == 0) {
			chr = false;
			continue;
		}
		if (!chr || sscanf(line, " %10s %63s", num, name) != 2)
			continue;
		if (strcmp(name, "nvidia-uvm") != 0 || parse_u32(num, &major) < 0 || major == 0 ||
		    major > 4095)
			continue;
		uvm = major;
	}
	*ret_uvm = uvm;
	return 0;
}

void devices_policy_init(struct devices_policy *p, unsigned uvm_major)
{
	*p = (struct devices_policy){.uvm_major = uvm_major};
}

int devices_policy_allow_minor(struct devices_policy *p, unsigned minor)
{
	if (minor > DEVICES_GPU_MINOR_MAX)
		return -ERANGE;
	p->gpu_minors[minor / 64] |= 1ULL << (minor % 64);
	return 0;
}

int devices_policy_allow_gpus(struct devices_policy *p, const struct gpu_inventory *inv,
			      const struct gpu_allocation *a)
{
	for (size_t i = 0; i < GPU_MAX; i++) {
		const struct gpu_device *d;
		int r;

		if (!(a->mask & (1ULL << i)))
			continue;
		d = gpu_device(inv, i);
		if (!d)
			return -ENODEV;
		r = devices_policy_allow_minor(p, d->minor);
		if (r < 0)
			return r;
	}
	return 0;
}

static bool any_gpu(const struct devices_policy *p)
{
	return p->gpu_minors[0] | p->gpu_minors[1] | p->gpu_minors[2] | p->gpu_minors[3];
}

static bool minor_allowed(const struct devices_policy *p, unsigned minor)
{
	return minor > DEVICES_GPU_MINOR_MAX ||
	       (p->gpu_minors[minor / 64] & (1ULL << (minor % 64)));
}

bool devices_policy_allows(const struct devices_policy *p, unsigned major, unsigned minor)
{
	if (major == DEVICES_NVIDIA_MAJOR)
		return minor_allowed(p, minor);
	if (p->uvm_major && major == p->uvm_major)
		return any_gpu(p);
	return true;
}

/* In deny-by-default mode, does the list allow NVIDIA nodes through a wildcard? */
static bool list_has_nvidia_wildcard(const char *list, unsigned uvm_major)
{
	char pat195[32], patuvm[32];

	snprintf(pat195, sizeof(pat195), "c %u:* ", DEVICES_NVIDIA_MAJOR);
	snprintf(patuvm, sizeof(patuvm), "c %u:* ", uvm_major);
	for (const char *l = list; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, "a ", 2) == 0 || strncmp(l, "c *:", 4) == 0 ||
		    strncmp(l, pat195, strlen(pat195)) == 0 ||
		    (uvm_major && strncmp(l, patuvm, strlen(patuvm)) == 0))
			return true;
	}
	return false;
}

int devices_v1_apply(int dirfd, const struct devices_policy *p)
{
	_cleanup_free_ char *list = NULL;
	bool allow_default;
	char line[64];
	int r;

	r = read_file_at(dirfd, "devices.list", 1024 * 1024, &list, NULL);
	if (r < 0)
		return r;
	/* Allow-by-default cgroups list exactly "a *:* rwm" (their deny exceptions are hidden). */
	allow_default = strcmp(list, "a *:* rwm\n") == 0;

	for (unsigned m = 0; m <= DEVICES_GPU_MINOR_MAX; m++) {
		if (minor_allowed(p, m))
			continue;
		snprintf(line, sizeof(line), "c %u:%u rwm", DEVICES_NVIDIA_MAJOR, m);
		r = write_file_at(dirfd, "devices.deny", line);
		if (r < 0)
			return r;
	}
	if (p->uvm_major && !any_gpu(p)) {
		snprintf(line, sizeof(line), "c %u:* rwm", p->uvm_major);
		r = write_file_at(dirfd, "devices.deny", line);
		if (r < 0)
			return r;
	}
	if (!allow_default) {
		free(list);
		list = NULL;
		r = read_file_at(dirfd, "devices.list", 1024 * 1024, &list, NULL);
		if (r < 0)
			return r;
		if (list_has_nvidia_wildcard(list, p->uvm_major))
			return -EOPNOTSUPP;
	}
	return 0;
}

bool devices_policy_equal(const struct devices_policy *a, const struct devices_policy *b)
{
	return a->uvm_major == b->uvm_major &&
	       memcmp(a->gpu_minors, b->gpu_minors, sizeof(a->gpu_minors)) == 0;
}
