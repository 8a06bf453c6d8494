/* SPDX-License-Identifier: MIT */
/* The task's sandbox: namespaces and mounts planned before fork (docs/sandbox.md). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

#include "agent/spec.h"
#include "isolation/launch.h"

struct agent;

#define SANDBOX_STRS_MAX (LAUNCH_MOUNTS_MAX * 3)

struct sandbox_plan {
	unsigned int ns_flags; /* LAUNCH_NS_* */
	bool private_tmp, protect_system;
	size_t n;
	struct launch_mount m[LAUNCH_MOUNTS_MAX];
	char *strs[SANDBOX_STRS_MAX]; /* owned copies the mounts point into */
	size_t nstrs;
};

/*
 * From the agent's [sandbox] defaults and the spec's "sandbox". A layer that is on by default
 * may be turned off only by root, or for a task that does not run as root (-EPERM otherwise,
 * err names the field). gpu_devs: the task's GPU nodes for its private /dev (names under /dev,
 * space-separated; gpu_glue_dev_names). -EOPNOTSUPP when the node cannot give tasks a mount
 * namespace.
 */
int sandbox_plan_build(struct agent *a, const struct task_spec *s, uid_t submitter, uid_t task_uid,
		       const char *gpu_devs, struct sandbox_plan *ret, char *err, size_t errlen);
void sandbox_plan_free(struct sandbox_plan *p);
/* NULL when a task can have its mount namespace here, else why not. Forks a child. */
const char *sandbox_probe(void);
/*
 * corralctl status: each layer, whether it is on by default and enforced on this node
 * {"mount_namespace": "on"|"off"|"unavailable: why", "sys_read_only", "agent_files_hidden",
 *  "private_tmp", "tmp_size", "protect_system", "private_dev", "ipc_namespace", "uts_namespace",
 *  "pid_namespace", "landlock": "on (ABI N)"|"off (kernel offers ABI N)"|"unavailable: why"}.
 * New reference.
 */
json_t *sandbox_status_json(const struct agent *a);
