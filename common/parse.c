/* SPDX-License-Identifier: MIT */
#include "common/parse.h"
#include "common/macro.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
