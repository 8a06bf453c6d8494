/* SPDX-License-Identifier: MIT */
/*
 * The agent's cache of compiled seccomp filters. Compiling a JSON profile with libseccomp costs
 * about a millisecond, paid once per profile instead of once per launch. A cached entry is
 * reused while the profile file's mtime and size are unchanged (built-ins never change).
 * Library code: never prints.
 */
#pragma once

#include <stddef.h>

struct profile_cache;
struct sbx_filter;

int profile_cache_new(struct profile_cache **ret);
/* Frees every cached filter. NULL is a no-op. */
void profile_cache_free(struct profile_cache *c);
/*
 * The filter of profile name (a built-in, a name in seccomp_dir, or root's own path), or of
 * content (the profile's JSON as the client sent it; name is then only its label), compiled
 * with flags (SBX_COMPILE_*). *ret stays owned by the cache (valid until the entry is
 * replaced, after at least 16 other profiles). Errors: -errno with the reason in err (the
 * caller names the profile). A notice (names this libseccomp does not know, skipped) goes to
 * notice, "" if none.
 */
int profile_cache_get(struct profile_cache *c, const char *seccomp_dir, const char *name,
		      const char *content, unsigned int flags, const struct sbx_filter **ret,
		      char *err, size_t errlen, char *notice, size_t noticelen);
