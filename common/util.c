/* SPDX-License-Identifier: MIT */
#include "common/util.h"
#include "common/macro.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int parse_u64(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	if (errno || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

int parse_u32(const char *s, uint32_t *ret)
{
	uint64_t v;
	int r = parse_u64(s, &v);

	if (r < 0)
		return r;
	if (v > UINT32_MAX)
		return -ERANGE;
	*ret = (uint32_t)v;
	return 0;
}

int parse_int(const char *s, int *ret)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno == ERANGE || v > INT_MAX || v < INT_MIN)
		return -ERANGE;
	if (errno || *end)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

int parse_double(const char *s, double *ret)
{
	char *end;
	double v;

	if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno == ERANGE)
		return -ERANGE;
	if (errno || *end || !isfinite(v) || v < 0)
		return -EINVAL;
	*ret = v;
	return 0;
}

int parse_size(const char *s, uint64_t *ret)
{
	char *end;
	double v;
	uint64_t mult = 1;

	if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || !isfinite(v) || v < 0 || end == s)
		return -EINVAL;
	if (*end) {
		switch (toupper((unsigned char)*end)) {
		case 'B':
			mult = 1;
			break;
		case 'K':
			mult = 1ULL << 10;
			break;
		case 'M':
			mult = 1ULL << 20;
			break;
		case 'G':
			mult = 1ULL << 30;
			break;
		case 'T':
			mult = 1ULL << 40;
			break;
		case 'P':
			mult = 1ULL << 50;
			break;
		default:
			return -EINVAL;
		}
		end++;
		if (mult > 1) {
			if (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0)
				end += strlen(end);
			else if (*end == 'i' || *end == 'I')
				return -EINVAL;
		}
		if (*end)
			return -EINVAL;
	}
	v *= (double)mult;
	/* At most INT64_MAX: sizes travel as JSON integers (signed 64-bit) in specs and records. */
	if (v >= 9223372036854775807.0)
		return -ERANGE;
	*ret = (uint64_t)v;
	return 0;
}

int parse_duration_ns(const char *s, uint64_t *ret)
{
	char *end;
	double v, mult = 1e9;

	if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || !isfinite(v) || v < 0 || end == s)
		return -EINVAL;
	if (*end) {
		if (strcmp(end, "ms") == 0)
			mult = 1e6;
		else if (strcmp(end, "s") == 0)
			mult = 1e9;
		else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
			mult = 60e9;
		else if (strcmp(end, "h") == 0)
			mult = 3600e9;
		else if (strcmp(end, "d") == 0)
			mult = 86400e9;
		else
			return -EINVAL;
	}
	v *= mult;
	if (v >= 9223372036854775807.0) /* INT64_MAX ns, 292 years: a JSON integer */
		return -ERANGE;
	*ret = (uint64_t)v;
	return 0;
}

int parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = {"1", "yes", "true", "on"};
	static const char *const no[] = {"0", "no", "false", "off"};

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++)
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return 0;
		}
	for (size_t i = 0; i < ARRAY_SIZE(no); i++)
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return 0;
		}
	return -EINVAL;
}

int parse_signal(const char *s, int *ret)
{
	static const struct {
		const char *name;
		int sig;
	} sigs[] = {
	    {"HUP", SIGHUP},   {"INT", SIGINT},	  {"QUIT", SIGQUIT}, {"ILL", SIGILL},
	    {"ABRT", SIGABRT}, {"FPE", SIGFPE},	  {"KILL", SIGKILL}, {"SEGV", SIGSEGV},
	    {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"USR1", SIGUSR1},
	    {"USR2", SIGUSR2}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
	    {"XCPU", SIGXCPU}, {"SYS", SIGSYS},	  {"BUS", SIGBUS},   {"TRAP", SIGTRAP},
	};
	int n;

	if (!s || !*s)
		return -EINVAL;
	if (parse_int(s, &n) == 0) {
		if (n < 1 || n > SIGRTMAX)
			return -ERANGE;
		*ret = n;
		return 0;
	}
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		if (strcasecmp(s, sigs[i].name) == 0) {
			*ret = sigs[i].sig;
			return 0;
		}
	return -EINVAL;
}

int read_file_at(int dirfd, const char *name, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, cap = 4096;

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
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

int read_file(const char *path, size_t max, char **ret, size_t *ret_len)
{
	return read_file_at(AT_FDCWD, path, max, ret, ret_len);
}

int read_u64_file_at(int dirfd, const char *name, uint64_t *ret)
{
	_cleanup_free_ char *s = NULL;
	size_t len;
	int r;

	r = read_file_at(dirfd, name, 4096, &s, &len);
	if (r < 0)
		return r;
	while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == ' '))
		s[--len] = 0;
	return parse_u64(s, ret);
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

char *growbuf_room(struct growbuf *b, size_t n, size_t max)
{
	if (b->failed)
		return NULL;
	if (n > max || b->len > max - n) {
		b->failed = true;
		return NULL;
	}
	if (b->cap - b->len < n) {
		size_t cap = b->cap ? b->cap : 4096;
		char *p;

		while (cap - b->len < n) {
			if (cap > SIZE_MAX / 2) {
				b->failed = true;
				return NULL;
			}
			cap *= 2;
		}
		p = realloc(b->p, cap);
		if (!p) {
			b->failed = true;
			return NULL;
		}
		b->p = p;
		b->cap = cap;
	}
	b->len += n;
	return b->p + b->len - n;
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

uint64_t now_ns(int clockid)
{
	struct timespec ts;

	clock_gettime(clockid, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

void format_rfc3339_us(uint64_t realtime_ns, char *buf, size_t len)
{
	time_t sec = (time_t)(realtime_ns / NSEC_PER_SEC);
	unsigned usec = (unsigned)((realtime_ns % NSEC_PER_SEC) / 1000);
	struct tm tm;

	gmtime_r(&sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%06uZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, usec);
}

int parse_rfc3339(const char *s, uint64_t *ret_realtime_ns)
{
	struct tm tm = {0};
	const char *p;
	uint64_t frac_ns = 0;
	time_t t;

	if (!s)
		return -EINVAL;
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -EINVAL;
	if (*p == '.') {
		uint64_t scale = 100000000ULL;

		p++;
		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		while (isdigit((unsigned char)*p)) {
			frac_ns += (uint64_t)(*p - '0') * scale;
			scale /= 10;
			p++;
		}
	}
	if (strcmp(p, "Z") != 0 && strcmp(p, "+00:00") != 0)
		return -EINVAL;
	if (tm.tm_year < 70)
		return -ERANGE;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -EINVAL;
	*ret_realtime_ns = (uint64_t)t * NSEC_PER_SEC + frac_ns;
	return 0;
}

int proc_start_time(pid_t pid, uint64_t *ret)
{
	char path[32 + DECIMAL_STR_MAX(pid_t)];
	_cleanup_free_ char *buf = NULL;
	char *p;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	r = read_file(path, 8192, &buf, NULL);
	if (r < 0)
		return r;
	/* comm may contain spaces and parens: skip to the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	p++;
	/* fields after comm: 3=state ... 22=starttime, i.e. 20 more separators */
	for (int field = 3; field < 22; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return -EIO;
	}
	errno = 0;
	*ret = strtoull(p + 1, NULL, 10);
	return errno ? -errno : 0;
}

int read_boot_id(char buf[37])
{
	_cleanup_free_ char *s = NULL;
	int r = read_file("/proc/sys/kernel/random/boot_id", 128, &s, NULL);

	if (r < 0)
		return r;
	if (strlen(s) < 36)
		return -EIO;
	memcpy(buf, s, 36);
	buf[36] = 0;
	return 0;
}

void fputs_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}
