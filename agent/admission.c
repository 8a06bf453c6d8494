/* SPDX-License-Identifier: MIT */
/* Admission of a launch (see admission.h). Library code: never logs. */
#include "agent/admission.h"
#include "agent/spec.h"
#include "agent/users.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/parse.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Is uid a member of the group (by name), per the peer's process groups or the passwd db? */
static bool in_group(struct users *users, const char *group, uid_t uid, gid_t gid)
{
	const struct user_info *u;
	struct group *gr;

	if (!group || !*group)
		return false;
	gr = getgrnam(group);
	if (!gr)
		return false;
	if (gid == gr->gr_gid)
		return true;
	u = users ? users_by_uid(users, uid) : NULL;
	if (!u)
		return false;
	for (int i = 0; i < u->n_groups; i++)
		if (u->groups[i] == gr->gr_gid)
			return true;
	return false;
}

static bool user_listed(const char *list, const char *user)
{
	_cleanup_free_ char *dup = NULL;
	char *save = NULL;

	if (!list || strcmp(list, "*") == 0)
		return true;
	dup = strdup(list);
	if (!dup)
		return false;
	for (char *tok = strtok_r(dup, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		if (strcmp(tok, user) == 0)
			return true;
	return false;
}

bool admission_is_privileged(const struct admission_policy *p, struct users *users, uid_t uid,
			     gid_t gid)
{
	return uid == 0 || in_group(users, p->allowed_group, uid, gid);
}

int admission_may_act_as(const struct admission_policy *p, uid_t uid, bool privileged,
			 uid_t target_uid, const char *target_name, char *err, size_t errlen)
{
	if (target_uid == uid)
		return 0;
	if (!privileged) {
		return err_set(
		    err, errlen, -EPERM,
		    "permission denied: uid %u may only run tasks as itself (not as \"%s\"); "
		    "ask an administrator to add you to group \"%s\"",
		    uid, target_name ? target_name : "?", p->allowed_group ? p->allowed_group : "");
	}
	if (target_uid == 0 && uid != 0 && !p->allow_root_tasks) {
		return err_set(err, errlen, -EPERM,
			       "permission denied: tasks as root need allow_root_tasks=yes");
	}
	if (target_uid != 0 && !user_listed(p->allowed_users, target_name ? target_name : "")) {
		return err_set(err, errlen, -EPERM,
			       "permission denied: user \"%s\" is not in allowed_users",
			       target_name ? target_name : "?");
	}
	return 0;
}

int admission_resolve_user(struct users *users, const char *spec_user, uid_t submitter,
			   const struct user_info **ret, char *err, size_t errlen)
{
	const struct user_info *pw;

	if (spec_user) {
		pw = users_by_name(users, spec_user);
		if (!pw) {
			uint32_t u;

			if (parse_u32(spec_user, &u) == 0)
				pw = users_by_uid(users, u);
		}
		if (!pw) {
			return err_set(err, errlen, -ENOENT, "user: no such user \"%.64s\"",
				       spec_user);
		}
	} else {
		pw = users_by_uid(users, submitter);
		if (!pw) {
			return err_set(err, errlen, -ENOENT, "user: uid %u has no passwd entry",
				       submitter);
		}
	}
	*ret = pw;
	return 0;
}

int admission_check_slots(const struct admission_node *n, char *err, size_t errlen)
{
	if (n->n_live < n->max_tasks)
		return 0;
	return err_set(err, errlen, -EBUSY,
		       "refused: the node runs its maximum of %u tasks (max_tasks)", n->max_tasks);
}

int admission_check_reserve(const struct admission_node *n, const struct task_spec *spec, char *err,
			    size_t errlen)
{
	if (spec->memory_max && n->mem_total &&
	    n->mem_used + spec->memory_max + n->reserve_memory > n->mem_total) {
		return err_set(
		    err, errlen, -ENOSPC,
		    "refused: memory request %llu MiB exceeds what is left on the node "
		    "(%llu MiB total, %llu MiB reserved, %llu MiB requested by running tasks)",
		    (unsigned long long)(spec->memory_max >> 20),
		    (unsigned long long)(n->mem_total >> 20),
		    (unsigned long long)(n->reserve_memory >> 20),
		    (unsigned long long)(n->mem_used >> 20));
	}
	if (spec->cpus > 0 && n->cpus_used + spec->cpus + n->reserve_cpus > (double)n->ncpus) {
		return err_set(
		    err, errlen, -ENOSPC,
		    "refused: cpus request %.2f exceeds what is left on the node (%u cpus, "
		    "%.2f reserved, %.2f requested by running tasks)",
		    spec->cpus, n->ncpus, n->reserve_cpus, n->cpus_used);
	}
	return 0;
}
