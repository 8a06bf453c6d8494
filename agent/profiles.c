/* SPDX-License-Identifier: MIT */
/* The cache of compiled seccomp filters (see profiles.h). */
#include "agent/profiles.h"
#include "common/error.h"
#include "common/macro.h"
#include "isolation/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROFILE_CACHE_MAX 16
struct profile_cache_entry {
	char *name;
	unsigned int flags; /* SBX_COMPILE_* */
	struct timespec mtime;
	off_t size;
	struct sbx_filter *filter;
};

struct profile_cache {
	struct profile_cache_entry e[PROFILE_CACHE_MAX];
};

int profile_cache_new(struct profile_cache **ret)
{
	*ret = calloc(1, sizeof(**ret));
	return *ret ? 0 : -ENOMEM;
}

void profile_cache_free(struct profile_cache *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < PROFILE_CACHE_MAX; i++) {
		free(c->e[i].name);
		sbx_filter_free(c->e[i].filter);
	}
	free(c);
}

static int profile_stat(const char *seccomp_dir, const char *name, struct stat *st)
{
	char path[4096];

	if (strchr(name, '/')) {
		/* root's own path (others send the content): a regular file, opened without
		 * waiting for a FIFO's writer or a device */
		_cleanup_close_ int fd = open(name, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

		if (fd < 0)
			return -errno;
		if (fstat(fd, st) < 0)
			return -errno;
		return S_ISREG(st->st_mode) ? 0 : -EBADFD;
	}
	snprintf(path, sizeof(path), "%s/%s.json", seccomp_dir, name);
	if (stat(path, st) == 0)
		return 0;
	memset(st, 0, sizeof(*st)); /* built-in */
	return 0;
}

/* Cache key of a profile sent as content: FNV-1a of the text and its length. */
static void content_key(const char *text, char *buf, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)text; *p; p++, n++)
		h = (h ^ *p) * 0x100000001b3ULL;
	snprintf(buf, len, "#%016llx-%zu", (unsigned long long)h, n);
}

int profile_cache_get(struct profile_cache *c, const char *seccomp_dir, const char *name,
		      const char *content, unsigned int flags, const struct sbx_filter **ret,
		      char *err, size_t errlen, char *notice, size_t noticelen)
{
	struct profile_cache_entry *e = NULL;
	struct sbx_filter *f = NULL;
	struct stat st = {0};
	char key[64];
	int r;

	err[0] = 0;
	notice[0] = 0;
	if (content) {
		content_key(content, key, sizeof(key));
		name = key;
	} else {
		r = profile_stat(seccomp_dir, name, &st);
		if (r < 0) {
			/* the caller names the profile */
			return err_set(err, errlen, r, "%s",
				       r == -EBADFD ? "not a regular file" : strerror(-r));
		}
	}
	for (size_t i = 0; i < PROFILE_CACHE_MAX; i++) {
		struct profile_cache_entry *x = &c->e[i];

		if (x->name && strcmp(x->name, name) == 0 && x->flags == flags) {
			if (x->mtime.tv_sec == st.st_mtim.tv_sec &&
			    x->mtime.tv_nsec == st.st_mtim.tv_nsec && x->size == st.st_size) {
				*ret = x->filter;
				return 0;
			}
			e = x;
			break;
		}
	}
	if (content)
		r = sbx_profile_compile_flags(content, strlen(content), flags, &f, err, errlen);
	else
		r = sbx_profile_load_flags(name, seccomp_dir, flags, &f, err, errlen);
	if (r < 0)
		return r;
	if (err[0]) /* a notice: allowed names this libseccomp does not know, skipped */
		snprintf(notice, noticelen, "%s", err);
	err[0] = 0;
	if (!e) {
		e = &c->e[0];
		for (size_t i = 0; i < PROFILE_CACHE_MAX; i++)
			if (!c->e[i].name) {
				e = &c->e[i];
				break;
			}
	}
	free(e->name);
	sbx_filter_free(e->filter);
	e->name = strdup(name);
	e->flags = flags;
	e->filter = f;
	e->mtime = st.st_mtim;
	e->size = st.st_size;
	if (!e->name) {
		sbx_filter_free(f);
		e->filter = NULL;
		return -ENOMEM;
	}
	*ret = f;
	return 0;
}
