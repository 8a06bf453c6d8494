/* SPDX-License-Identifier: MIT */
/*
 * GPU device policy on the unified hierarchy: the loader of bpf/devices.bpf.c. The policy
 * itself (which GPU minors a task may open) and its v1 form are isolation/devices.h.
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <stdint.h>

#include "isolation/devices.h"

/*
 * v2 / unified: a BPF_PROG_TYPE_CGROUP_DEVICE program holding one policy. An attachment
 * (BPF_PROG_ATTACH, BPF_F_ALLOW_MULTI) belongs to the cgroup: it stays when the loader closes
 * its handles, exits or restarts, and goes away with the cgroup, so re-adopted tasks keep their
 * policy. Loading costs milliseconds (ELF and BTF parsing, verifier, JIT: tens of ms on a slow
 * host) and attaching microseconds, so the agent loads one program per distinct policy and
 * attaches it to each task cgroup with that policy (devices_bpf_load + devices_bpf_attach_to).
 */
struct devices_prog;
/* Load the program for policy p, not attached anywhere. */
int devices_bpf_load(const struct devices_policy *p, struct devices_prog **ret);
/* Attach a loaded program to one more cgroup (no handle kept: the cgroup's removal detaches). */
int devices_bpf_attach_to(const struct devices_prog *d, int cgroup_fd);
/* The policy a loaded program enforces. */
const struct devices_policy *devices_bpf_policy(const struct devices_prog *d);
/* Load and attach to cgroup_fd in one step, keeping the cgroup for devices_bpf_detach. */
int devices_bpf_attach(int cgroup_fd, const struct devices_policy *p, struct devices_prog **ret);
/* Detach from the cgroup given to devices_bpf_attach (optional: cgroup removal does it). */
int devices_bpf_detach(struct devices_prog *d);
/* Accesses denied so far by this program, over every cgroup it is attached to. */
uint64_t devices_bpf_denials(const struct devices_prog *d);
/* Close the loader's handles; the attachments stay. NULL is fine. */
void devices_bpf_free(struct devices_prog *d);
