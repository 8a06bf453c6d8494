/* SPDX-License-Identifier: MIT */
/* Spare-inode pool for small state files; see fpool.h. */
#include "common/fpool.h"
#include "common/macro.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

static int push_name(struct fpool *p, char *name)
{
	if (p->n == p->cap) {
		size_t nc = p->cap ? p->cap * 2 : 64;
		char **nv = realloc(p->names, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		p->names = nv;
		p->cap = nc;
	}
	p->names[p->n++] = name;
	return 0;
}

int fpool_open(struct fpool *p, const char *dir, size_t max)
{
	DIR *d;
	struct dirent *de;
	int r, fd;

	*p = (struct fpool){.dirfd = -1, .max = max};
	if (max == 0)
		return 0;
	r = mkdir_p(dir, 0700);
	if (r < 0)
		return r;
	p->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dirfd < 0)
		return -errno;
	fd = dup(p->dirfd);
	if (fd < 0 || !(d = fdopendir(fd))) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		fpool_close(p);
		return r;
	}
	while ((de = readdir(d))) {
		unsigned long long s;
		char *name, end;

		if (de->d_name[0] == '.')
			continue;
		/* Ours are "s<seq>"; anything else found here is recycled just the same. */
		if (sscanf(de->d_name, "s%llu%c", &s, &end) == 1 && s >= p->seq)
			p->seq = s + 1;
		if (p->n >= p->max) {
			(void)unlinkat(p->dirfd, de->d_name, 0);
			continue;
		}
		name = strdup(de->d_name);
		if (!name || push_name(p, name) < 0) {
			free(name);
			break;
		}
	}
	closedir(d);
	return 0;
}

void fpool_close(struct fpool *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->names[i]);
	free(p->names);
	if (p->dirfd >= 0)
		close(p->dirfd);
	*p = (struct fpool){.dirfd = -1};
}

/* Rename a spare to path: 0, or -ENOENT when there is none left. */
static int take_spare(struct fpool *p, const char *path)
{
	while (p && p->dirfd >= 0 && p->n > 0) {
		char *name = p->names[--p->n];
		int r = renameat(p->dirfd, name, AT_FDCWD, path);

		free(name);
		if (r == 0) {
			p->reused++;
			return 0;
		}
		if (errno != ENOENT) /* EXDEV and the like: the pool cannot serve this path */
			return -errno;
	}
	return -ENOENT;
}

int fpool_remove(struct fpool *p, const char *path)
{
	if (p && p->dirfd >= 0 && p->n < p->max) {
		char name[32];

		snprintf(name, sizeof(name), "s%llu", (unsigned long long)p->seq++);
		if (renameat(AT_FDCWD, path, p->dirfd, name) == 0) {
			char *dup_name = strdup(name);

			if (dup_name && push_name(p, dup_name) == 0) {
				p->recycled++;
				return 0;
			}
			free(dup_name);
			(void)unlinkat(p->dirfd, name, 0);
			return 0;
		}
		if (errno == ENOENT)
			return -ENOENT;
	}
	if (unlink(path) < 0)
		return -errno;
	if (p)
		p->unlinked++;
	return 0;
}

int fpool_place(struct fpool *p, const char *path)
{
	return take_spare(p, path);
}

/* Write buf into the open fd from offset 0 and cut the file to len. */
static int fill_fd(int fd, const void *buf, size_t len)
{
	const char *s = buf;
	size_t off = 0;

	while (off < len) {
		ssize_t n = pwrite(fd, s + off, len - off, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += (size_t)n;
	}
	/* A spare keeps its data block: rewriting ~500 bytes frees and allocates nothing. */
	if (ftruncate(fd, (off_t)len) < 0)
		return -errno;
	return 0;
}

static int open_tmp(const char *tmp, mode_t mode, bool placed)
{
	int fd;

	if (placed) {
		fd = open(tmp, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
		if (fd >= 0) {
			(void)fchmod(fd, mode);
			return fd;
		}
		if (errno != ENOENT)
			return -errno;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, mode);
	return fd < 0 ? -errno : fd;
}

int fpool_fill(const char *tmp, const char *path, const void *buf, size_t len, mode_t mode)
{
	int fd = open_tmp(tmp, mode, true), r;

	if (fd < 0)
		return fd;
	r = fill_fd(fd, buf, len);
	close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

int fpool_replace(struct fpool *p, const char *path, const void *buf, size_t len, mode_t mode)
{
	_cleanup_free_ char *tmp = NULL;
	bool placed;
	int fd, r;

	if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0)
		return -ENOMEM;
	placed = take_spare(p, tmp) == 0;
	fd = open_tmp(tmp, mode, placed);
	if (fd < 0)
		return fd;
	if (!placed && p)
		p->created++;
	r = fill_fd(fd, buf, len);
	close(fd);
	if (r < 0)
		goto fail;
	/* Swap with the old content when there is one, and keep its inode as a spare. */
	if (p && p->dirfd >= 0) {
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_EXCHANGE) == 0) {
			(void)fpool_remove(p, tmp);
			return 0;
		}
		/* ENOENT: no old file; EINVAL/ENOSYS: no exchange here; either way, rename. */
		if (errno != ENOENT && errno != EINVAL && errno != ENOSYS) {
			r = -errno;
			goto fail;
		}
	}
	if (rename(tmp, path) == 0)
		return 0;
	r = -errno;
fail:
	(void)fpool_remove(p, tmp);
	return r;
}
