/* SPDX-License-Identifier: MIT */
/*
 * Cache of passwd entries and supplementary groups, for the launch path: getpwuid/getpwnam
 * and getgrouplist read and parse /etc/passwd and /etc/group on every call (nss_files), which
 * was about 4% of the agent's work per launch. users_refresh() drops every entry when either
 * file changed (mtime, size or inode) or the entries are older than USERS_TTL_NS (for other
 * NSS sources); the agent calls it once per request, so that the entries it hands out stay
 * valid until its next call (lookups never drop anything).
 * Library code: never prints.
 */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#define USERS_TTL_NS (30ULL * 1000000000ULL)

struct user_info {
	char *name, *dir, *shell;
	uid_t uid;
	gid_t gid;
	gid_t *groups; /* getgrouplist(name, gid): gid first */
	int n_groups;
};

struct users;

/* watch: files whose change drops the cache (NULL: /etc/passwd and /etc/group). */
struct users *users_new(const char *const *watch);
void users_free(struct users *c);
/* Drop the entries if a watched file changed or they are older than the TTL. */
void users_refresh(struct users *c, uint64_t now_mono_ns);
/* NULL with errno set (ENOENT: no such user). Valid until the next users_refresh. */
const struct user_info *users_by_uid(struct users *c, uid_t uid);
const struct user_info *users_by_name(struct users *c, const char *name);
/* Incremented each time the entries are dropped (tests). */
uint64_t users_generation(const struct users *c);
