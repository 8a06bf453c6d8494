/* SPDX-License-Identifier: MIT */
#include "common/proc.h"
#include "common/fileio.h"
#include "common/macro.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
