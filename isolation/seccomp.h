/* SPDX-License-Identifier: MIT */
/*
 * Seccomp profiles in the OCI/Docker JSON format, compiled with libseccomp in the parent
 * (before fork) to a classic-BPF program that the child only installs.
 * Library code: never prints, returns 0 or -errno; parse errors are described in err.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbx_filter;

/* Compile a profile given as JSON text. -EINVAL with err naming the field or syscall. */
int sbx_profile_compile(const char *json, size_t len, struct sbx_filter **ret, char *err,
			size_t errlen);
/*
 * name_or_path: a built-in name ("default", "strict", "unconfined" = no filter, *ret NULL and
 * return 0), a profile name looked up as "<dir>/<name>.json" (dir may be NULL), or a path
 * containing '/'.
 */
int sbx_profile_load(const char *name_or_path, const char *dir, struct sbx_filter **ret, char *err,
		     size_t errlen);
/* Built-in profile JSON text, NULL if unknown. */
const char *sbx_builtin_profile(const char *name);

/*
 * Child side: install the filter (seccomp(2) SECCOMP_SET_MODE_FILTER; the caller has set
 * no_new_privs). Async-signal-safe: no allocation. NULL filter: no-op.
 */
int sbx_filter_apply(const struct sbx_filter *f);
void sbx_filter_free(struct sbx_filter *f);
/* Number of BPF instructions (for logs and tests). */
size_t sbx_filter_len(const struct sbx_filter *f);
