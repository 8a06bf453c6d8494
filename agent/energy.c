/* SPDX-License-Identifier: MIT */
/* RAPL energy through powercap sysfs (see agent/energy.h). Library code: nothing printed. */
#include "agent/energy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/macro.h"

static int read_text(const char *dir, const char *name, char *buf, size_t size)
{
	char path[600];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	do
		n = read(fd, buf, size - 1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return 0;
}

static int read_u64(const char *dir, const char *name, uint64_t *ret)
{
	char buf[64], *end;
	unsigned long long v;
	int r = read_text(dir, name, buf, sizeof(buf));

	if (r < 0)
		return r;
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno || end == buf || *end || buf[0] == '-')
		return -EBADMSG;
	*ret = v;
	return 0;
}

int energy_open(const char *root, struct energy_meter *ret)
{
	_cleanup_(closedirp) DIR *d = opendir(root);
	struct dirent *de;

	memset(ret, 0, sizeof(*ret));
	if (!d)
		return -errno;
	while ((de = readdir(d)) && ret->n < ENERGY_ZONES_MAX) {
		struct energy_zone *z = &ret->z[ret->n];
		char name[64];

		if (strncmp(de->d_name, "intel-rapl:", 11) != 0)
			continue;
		snprintf(z->dir, sizeof(z->dir), "%s/%s", root, de->d_name);
		if (read_text(z->dir, "name", name, sizeof(name)) < 0)
			continue;
		if (strncmp(name, "package-", 8) == 0)
			z->kind = ENERGY_PACKAGE;
		else if (strcmp(name, "dram") == 0)
			z->kind = ENERGY_DRAM;
		else
			continue; /* core, uncore (inside a package), psys (the platform) */
		if (read_u64(z->dir, "max_energy_range_uj", &z->max_range_uj) < 0 ||
		    read_u64(z->dir, "energy_uj", &z->last_uj) < 0)
			continue;
		ret->n++;
	}
	return ret->n ? 0 : -ENOENT;
}

int energy_read_uj(struct energy_meter *m, uint64_t ret_uj[_ENERGY_KIND_MAX], bool advance)
{
	int r = 0;

	for (int k = 0; k < _ENERGY_KIND_MAX; k++)
		ret_uj[k] = 0;
	for (size_t i = 0; i < m->n; i++) {
		struct energy_zone *z = &m->z[i];
		uint64_t now, d;

		if (read_u64(z->dir, "energy_uj", &now) < 0) {
			r = -EIO;
			continue;
		}
		if (now >= z->last_uj)
			d = now - z->last_uj;
		else if (z->last_uj <= z->max_range_uj)
			d = z->max_range_uj - z->last_uj + now; /* wrapped once */
		else
			d = now; /* a range smaller than the last value: taken as a reset */
		if (advance)
			z->last_uj = now;
		ret_uj[z->kind] += d;
	}
	return r;
}

int energy_read(struct energy_meter *m, double ret_j[_ENERGY_KIND_MAX])
{
	uint64_t uj[_ENERGY_KIND_MAX];
	int r = energy_read_uj(m, uj, true);

	for (int k = 0; k < _ENERGY_KIND_MAX; k++)
		ret_j[k] = (double)uj[k] / 1e6;
	return r;
}
