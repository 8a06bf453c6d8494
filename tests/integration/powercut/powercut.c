/* SPDX-License-Identifier: MIT */
/*
 * libpowercut.so: an LD_PRELOAD library that makes a kill -9 of a process behave, for one
 * file, like a power cut. Writes to the file named by $POWERCUT_FILE (an absolute path) are
 * kept in this process's memory, as a page cache would keep them, and reach the file only
 * when the process fsyncs or fdatasyncs it. Reads and fstat see the kept writes. A process
 * killed before its sync loses them, exactly what a power cut does to data that was written
 * but not yet made durable; what a sync returned for is on the file.
 *
 * Covered: pwrite/pwrite64, pread/pread64, fstat/fstat64, fsync, fdatasync, ftruncate (the
 * calls SQLite makes on its WAL file). ftruncate first writes the kept data, then truncates
 * (a conservative model: only more durable than a real page cache, never less). The file is
 * recognised by /proc/self/fd/N on each call. $POWERCUT_STATS (optional) names a file that
 * gets one line "syncs=N written=B synced=B" at every sync (bytes written so far, bytes this
 * sync took from memory to the file): proof that writes were held until a sync.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

struct kept {
	off_t off;
	size_t len;
	char *data;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct kept *kept;
static size_t nkept, capkept;
static unsigned long long syncs, written_bytes, kept_bytes;

static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static int (*real_fstat)(int, struct stat *);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_ftruncate)(int, off_t);

static void resolve(void)
{
	if (real_pwrite)
		return;
	real_pread = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
	real_fstat = (int (*)(int, struct stat *))dlsym(RTLD_NEXT, "fstat64");
	real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	real_ftruncate = (int (*)(int, off_t))dlsym(RTLD_NEXT, "ftruncate64");
	real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite64");
	if (!real_pwrite || !real_pread || !real_fstat || !real_fsync || !real_fdatasync ||
	    !real_ftruncate) {
		fprintf(stderr, "libpowercut: cannot resolve libc's calls\n");
		abort();
	}
}

static bool is_target(int fd)
{
	const char *want = getenv("POWERCUT_FILE");
	char link[64], path[PATH_MAX];
	ssize_t n;

	if (!want || fd < 0)
		return false;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return false;
	path[n] = 0;
	return strcmp(path, want) == 0;
}

/* The file's size with the kept writes (lock held). */
static off_t logical_size(int fd)
{
	struct stat st;
	off_t size = real_fstat(fd, &st) == 0 ? st.st_size : 0;

	for (size_t i = 0; i < nkept; i++)
		if (kept[i].off + (off_t)kept[i].len > size)
			size = kept[i].off + (off_t)kept[i].len;
	return size;
}

/*
 * Writes the kept data to the file, in order (lock held). Through a descriptor of its own:
 * the caller's may be read-only (an fsync needs no write access).
 */
static int flush_kept(void)
{
	int fd = nkept ? open(getenv("POWERCUT_FILE"), O_WRONLY | O_CLOEXEC) : -1, r = 0;

	if (nkept && fd < 0)
		return -1;
	for (size_t i = 0; i < nkept; i++) {
		size_t done = 0;

		while (done < kept[i].len && r == 0) {
			ssize_t n = real_pwrite(fd, kept[i].data + done, kept[i].len - done,
						kept[i].off + (off_t)done);

			if (n < 0 && errno != EINTR)
				r = -1;
			else if (n > 0)
				done += (size_t)n;
		}
		free(kept[i].data);
	}
	if (fd >= 0)
		close(fd);
	nkept = 0;
	kept_bytes = 0;
	return r;
}

static void stats(unsigned long long synced)
{
	const char *f = getenv("POWERCUT_STATS");
	FILE *o;

	if (!f || !(o = fopen(f, "a")))
		return;
	fprintf(o, "syncs=%llu written=%llu synced=%llu\n", syncs, written_bytes, synced);
	fclose(o);
}

static ssize_t kept_write(const void *buf, size_t len, off_t off)
{
	struct kept k = {.off = off, .len = len, .data = malloc(len ? len : 1)};

	if (!k.data) {
		errno = ENOMEM;
		return -1;
	}
	memcpy(k.data, buf, len);
	pthread_mutex_lock(&lock);
	if (nkept == capkept) {
		size_t cap = capkept ? 2 * capkept : 256;
		struct kept *p = realloc(kept, cap * sizeof(*p));

		if (!p) {
			pthread_mutex_unlock(&lock);
			free(k.data);
			errno = ENOMEM;
			return -1;
		}
		kept = p;
		capkept = cap;
	}
	kept[nkept++] = k;
	written_bytes += len;
	kept_bytes += len;
	pthread_mutex_unlock(&lock);
	return (ssize_t)len;
}

static ssize_t kept_read(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n;
	off_t size;
	size_t avail;

	pthread_mutex_lock(&lock);
	size = logical_size(fd);
	if (off >= size) {
		pthread_mutex_unlock(&lock);
		return 0;
	}
	avail = (size_t)(size - off) < len ? (size_t)(size - off) : len;
	memset(buf, 0, avail);
	n = real_pread(fd, buf, avail, off);
	if (n < 0) {
		pthread_mutex_unlock(&lock);
		return -1;
	}
	for (size_t i = 0; i < nkept; i++) {
		off_t a = kept[i].off > off ? kept[i].off : off;
		off_t b = kept[i].off + (off_t)kept[i].len;

		if (b > off + (off_t)avail)
			b = off + (off_t)avail;
		if (a < b)
			memcpy((char *)buf + (a - off), kept[i].data + (a - kept[i].off),
			       (size_t)(b - a));
	}
	pthread_mutex_unlock(&lock);
	return (ssize_t)avail;
}

static int do_sync(int fd, int (*sync_fn)(int))
{
	unsigned long long synced;
	int r;

	pthread_mutex_lock(&lock);
	synced = kept_bytes;
	r = flush_kept();
	syncs++;
	stats(synced);
	pthread_mutex_unlock(&lock);
	return r < 0 ? -1 : sync_fn(fd);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
	resolve();
	return is_target(fd) ? kept_write(buf, len, off) : real_pwrite(fd, buf, len, off);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	return pwrite64(fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
	resolve();
	return is_target(fd) ? kept_read(fd, buf, len, off) : real_pread(fd, buf, len, off);
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	return pread64(fd, buf, len, off);
}

static int stat_target(int fd, struct stat *st)
{
	int r;

	resolve();
	r = real_fstat(fd, st);
	if (r == 0 && is_target(fd)) {
		pthread_mutex_lock(&lock);
		st->st_size = logical_size(fd);
		pthread_mutex_unlock(&lock);
	}
	return r;
}

/* struct stat64 and struct stat are one layout on 64-bit targets */
int fstat64(int fd, struct stat64 *st)
{
	return stat_target(fd, (struct stat *)st);
}

int fstat(int fd, struct stat *st)
{
	return stat_target(fd, st);
}

int fsync(int fd)
{
	resolve();
	return is_target(fd) ? do_sync(fd, real_fsync) : real_fsync(fd);
}

int fdatasync(int fd)
{
	resolve();
	return is_target(fd) ? do_sync(fd, real_fdatasync) : real_fdatasync(fd);
}

int ftruncate64(int fd, off_t len)
{
	resolve();
	if (is_target(fd)) {
		pthread_mutex_lock(&lock);
		(void)flush_kept();
		pthread_mutex_unlock(&lock);
	}
	return real_ftruncate(fd, len);
}

int ftruncate(int fd, off_t len)
{
	return ftruncate64(fd, len);
}
