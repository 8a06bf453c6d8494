/* SPDX-License-Identifier: MIT */
/*
 * Admission of a launch, the stage before any plan: who runs the task, may the client ask
 * for that user, does the node have room. Pure decisions over the inputs given (a users
 * cache, the policy keys of [agent], the node's figures): no agent state, no side effects.
 * Each refusal returns a negative errno with the message for the client in err, naming the
 * field or the key concerned.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct task_spec;
struct user_info;
struct users;

/* [agent] allowed_group, allowed_users, allow_root_tasks. */
struct admission_policy {
	const char *allowed_group; /* its members (and root) are privileged clients */
	const char *allowed_users; /* NULL or "*": any; else a list separated by , or spaces */
	bool allow_root_tasks;
};

/* The node's capacity and what its live tasks asked for. */
struct admission_node {
	uint32_t max_tasks, n_live;
	uint64_t mem_total; /* 0: unknown, not checked */
	uint64_t reserve_memory, mem_used;
	uint32_t ncpus;
	double reserve_cpus, cpus_used;
};

/* Is a client (uid, gid from SO_PEERCRED) root or a member of the policy's allowed_group? */
bool admission_is_privileged(const struct admission_policy *p, struct users *users, uid_t uid,
			     gid_t gid);
/*
 * May a client (uid, privileged = admission_is_privileged) act as user (target_uid,
 * target_name)? The one rule for run and for show/kill/wait/ps of tasks it did not submit:
 * anyone as itself; privileged clients as users in allowed_users, members as root only with
 * allow_root_tasks. -EPERM with the reason in err.
 */
int admission_may_act_as(const struct admission_policy *p, uid_t uid, bool privileged,
			 uid_t target_uid, const char *target_name, char *err, size_t errlen);
/* The user a task runs as: spec_user (a name, or a uid in decimal), NULL: the submitter.
 * -ENOENT with "user: ..." in err. *ret is valid until the next users_refresh. */
int admission_resolve_user(struct users *users, const char *spec_user, uid_t submitter,
			   const struct user_info **ret, char *err, size_t errlen);
/* A free task slot (max_tasks)? -EBUSY with the reason in err. */
int admission_check_slots(const struct admission_node *n, char *err, size_t errlen);
/* Node safety: the spec's memory and cpus requests fit beside the live tasks' and the
 * reserve (refused, never queued). -ENOSPC with the figures in err. */
int admission_check_reserve(const struct admission_node *n, const struct task_spec *spec, char *err,
			    size_t errlen);
