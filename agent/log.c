/* SPDX-License-Identifier: MIT */
#include "agent/log.h"
#include "common/escape.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int max_level = LOG_INFO;

void log_set_max_level(int level)
{
	max_level = level;
}

int log_level_from_string(const char *s)
{
	static const char *const names[] = {"emerg",   "alert",	 "crit", "err",
					    "warning", "notice", "info", "debug"};

	for (int i = 0; i < (int)ARRAY_SIZE(names); i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -EINVAL;
}

/*
 * One entry is one line: the message is escaped (common/escape.h), so a task's or a client's
 * bytes (a program path with a newline, a terminal sequence) can neither forge another entry
 * nor reach the terminal of whoever reads the journal.
 */
void log_full(int level, const char *fmt, ...)
{
	char msg[2048], buf[4096];
	int n, saved = errno;
	va_list ap;

	if (level > max_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = snprintf(buf, sizeof(buf), "<%d>", level);
	esc_text(msg, buf + n, sizeof(buf) - (size_t)n - 1);
	n = (int)strlen(buf);
	buf[n++] = '\n';
	(void)!write(STDERR_FILENO, buf, (size_t)n);
	errno = saved;
}
