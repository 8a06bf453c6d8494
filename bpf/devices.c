/* SPDX-License-Identifier: MIT */
/* Loader of bpf/devices.bpf.c (cgroup device program). See devices.h. */
#include "bpf/devices.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/devices_types.h"
#include "common/macro.h"
#include "devices.skel.h"

struct devices_prog {
	struct devices_bpf *skel;
	struct devices_policy policy;
	int cgroup_fd; /* the cgroup of devices_bpf_attach, for devices_bpf_detach; else -1 */
	bool attached;
};

void devices_bpf_free(struct devices_prog *d)
{
	if (!d)
		return;
	devices_bpf__destroy(d->skel);
	if (d->cgroup_fd >= 0)
		close(d->cgroup_fd);
	free(d);
}

static int allow_key(int map_fd, unsigned major, unsigned minor)
{
	struct devices_key k = {.major = major, .minor = minor};
	__u8 one = 1;

	return bpf_map_update_elem(map_fd, &k, &one, BPF_ANY) < 0 ? -errno : 0;
}

int devices_bpf_load(const struct devices_policy *p, struct devices_prog **ret)
{
	struct devices_prog *d;
	int map_fd, r;

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cgroup_fd = -1;
	d->policy = *p;
	d->skel = devices_bpf__open();
	if (!d->skel) {
		r = errno ? -errno : -EINVAL;
		goto out_free;
	}
	d->skel->rodata->uvm_major = p->uvm_major;
	r = devices_bpf__load(d->skel);
	if (r < 0)
		goto out_free;

	map_fd = bpf_map__fd(d->skel->maps.allowed);
	r = allow_key(map_fd, DEVICES_NVIDIA_MAJOR, 254); /* nvidia-modeset */
	if (r >= 0)
		r = allow_key(map_fd, DEVICES_NVIDIA_MAJOR, 255); /* nvidiactl */
	for (unsigned m = 0; r >= 0 && m <= DEVICES_GPU_MINOR_MAX; m++)
		if (devices_policy_allows(p, DEVICES_NVIDIA_MAJOR, m))
			r = allow_key(map_fd, DEVICES_NVIDIA_MAJOR, m);
	if (r >= 0 && p->uvm_major && devices_policy_allows(p, p->uvm_major, 0))
		r = allow_key(map_fd, p->uvm_major, DEVICES_MINOR_ANY);
	if (r < 0)
		goto out_free;
	*ret = d;
	return 0;

out_free:
	devices_bpf_free(d);
	return r;
}

const struct devices_policy *devices_bpf_policy(const struct devices_prog *d)
{
	return &d->policy;
}

int devices_bpf_attach_to(const struct devices_prog *d, int cgroup_fd)
{
	if (cgroup_fd < 0)
		return -EBADF;
	if (bpf_prog_attach(bpf_program__fd(d->skel->progs.corral_devices), cgroup_fd,
			    BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI) < 0)
		return -errno;
	return 0;
}

int devices_bpf_attach(int cgroup_fd, const struct devices_policy *p, struct devices_prog **ret)
{
	struct devices_prog *d = NULL;
	int r;

	if (cgroup_fd < 0)
		return -EBADF;
	r = devices_bpf_load(p, &d);
	if (r < 0)
		return r;
	d->cgroup_fd = fcntl(cgroup_fd, F_DUPFD_CLOEXEC, 3);
	if (d->cgroup_fd < 0) {
		r = -errno;
		goto out_free;
	}
	r = devices_bpf_attach_to(d, d->cgroup_fd);
	if (r < 0)
		goto out_free;
	d->attached = true;
	*ret = d;
	return 0;

out_free:
	devices_bpf_free(d);
	return r;
}

int devices_bpf_detach(struct devices_prog *d)
{
	if (!d->attached)
		return 0;
	if (bpf_prog_detach2(bpf_program__fd(d->skel->progs.corral_devices), d->cgroup_fd,
			     BPF_CGROUP_DEVICE) < 0)
		return -errno;
	d->attached = false;
	return 0;
}

uint64_t devices_bpf_denials(const struct devices_prog *d)
{
	return d->skel->bss->denials;
}
