/* SPDX-License-Identifier: MIT */
#include "common/fileio.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/parse.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int read_fd(int fd, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, cap = 4096;

	cap = MIN(cap, max);
	buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap >= max) {
				char extra;
				ssize_t m = read(fd, &extra, 1);

				if (m < 0)
					return -errno;
				if (m == 0)
					break;
				return -EFBIG;
			}
			cap = MIN(cap * 2, max);
			nb = realloc(buf, cap + 1);
			if (!nb)
				return -ENOMEM;
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = 0;
	if (ret_len)
		*ret_len = len;
	*ret = TAKE_PTR(buf);
	return 0;
}

int read_file_at(int dirfd, const char *name, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return -errno;
	return read_fd(fd, max, ret, ret_len);
}

int read_file(const char *path, size_t max, char **ret, size_t *ret_len)
{
	return read_file_at(AT_FDCWD, path, max, ret, ret_len);
}

int open_regular(const char *path)
{
	struct stat st;
	int fd, r;

	/* O_NONBLOCK: a FIFO with no writer would block the open (and a signal cannot end it,
	 * the open is restarted); cleared again below for the regular file. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return -EBADFD;
	}
	r = fcntl(fd, F_GETFL);
	if (r < 0 || fcntl(fd, F_SETFL, r & ~O_NONBLOCK) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int read_regular_file(const char *path, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = open_regular(path);

	if (fd < 0)
		return fd;
	return read_fd(fd, max, ret, ret_len);
}

const char *regular_file_strerror(int r)
{
	return r == -EBADFD ? "not a regular file" : strerror(-r);
}

int secret_fd_check(int fd, const char *what, const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return err_set(err, errlen, -errno, "%s %s: %s", what, path, strerror(errno));
	if (st.st_mode & 077)
		return err_set(err, errlen, -EPERM,
			       "%s %s: mode %04o lets group or others at a secret: refused "
			       "(chmod 600 it)",
			       what, path, (unsigned)(st.st_mode & 07777));
	if (st.st_uid != geteuid() && st.st_uid != 0)
		return err_set(err, errlen, -EPERM,
			       "%s %s: owned by uid %u, not by uid %u that runs this or root: "
			       "refused (chown it)",
			       what, path, (unsigned)st.st_uid, (unsigned)geteuid());
	return 0;
}

ssize_t read_once(int fd, char *buf, size_t size)
{
	ssize_t n;

	if (size < 2)
		return -EINVAL;
	n = read(fd, buf, size - 1);
	if (n < 0)
		return -errno;
	if ((size_t)n == size - 1)
		return -EFBIG;
	buf[n] = 0;
	return n;
}

int read_u64_fd(int fd, uint64_t *ret)
{
	char buf[64];
	ssize_t n = read_once(fd, buf, sizeof(buf));

	if (n < 0)
		return (int)n;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = 0;
	return parse_u64(buf, ret);
}

int read_u64_file_at(int dirfd, const char *name, uint64_t *ret)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return -errno;
	return read_u64_fd(fd, ret);
}

int write_file_at(int dirfd, const char *name, const char *s)
{
	_cleanup_close_ int fd = -1;
	size_t len = strlen(s);
	ssize_t n;

	fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	n = write(fd, s, len);
	if (n < 0)
		return -errno;
	if ((size_t)n != len)
		return -EIO;
	return 0;
}

static int write_file_tmp_rename(const char *path, const void *buf, size_t len, mode_t mode,
				 bool sync)
{
	_cleanup_free_ char *tmp = NULL, *dir = NULL;
	_cleanup_close_ int fd = -1, dfd = -1;
	const char *p = buf;
	char *slash;
	int r = 0;

	if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0)
		return -ENOMEM;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			goto out_unlink;
		}
		p += n;
		len -= (size_t)n;
	}
	if (sync && fsync(fd) < 0) {
		r = -errno;
		goto out_unlink;
	}
	if (rename(tmp, path) < 0) {
		r = -errno;
		goto out_unlink;
	}
	if (!sync)
		return 0;
	dir = strdup(path);
	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (slash) {
		if (slash == dir)
			slash[1] = 0;
		else
			*slash = 0;
		dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else {
		dfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	}
	if (dfd >= 0)
		(void)fsync(dfd);
	return 0;
out_unlink:
	unlink(tmp);
	return r;
}

int write_file_atomic(const char *path, const void *buf, size_t len, mode_t mode)
{
	return write_file_tmp_rename(path, buf, len, mode, true);
}

int write_file_replace(const char *path, const void *buf, size_t len, mode_t mode)
{
	return write_file_tmp_rename(path, buf, len, mode, false);
}

int mkdir_p(const char *path, mode_t mode)
{
	_cleanup_free_ char *p = strdup(path);

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}
