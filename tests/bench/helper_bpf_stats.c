/* SPDX-License-Identifier: MIT */
/*
 * helper_bpf_stats PID NAME[,NAME...] -- COMMAND [ARGS...]: runs COMMAND with the kernel's BPF
 * run-time statistics on (BPF_ENABLE_STATS: on while this process holds the descriptor, off
 * after) and prints, for each BPF program process PID holds (a program or link descriptor,
 * /proc/PID/fdinfo "prog_id:") whose name is one of the NAMEs, the runs and run time it gained
 * while COMMAND ran:
 *   NAME runs=N ns=T ns_per_run=T/N
 * and a "total" line over them. Other processes' programs of the same name are not counted.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>

#define MAX_PROGS 64

struct prog {
	uint32_t id;
	char name[BPF_OBJ_NAME_LEN];
	uint64_t cnt0, ns0;
};

static int n_progs;
static struct prog progs[MAX_PROGS];

static bool wanted(const char *names, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = names; *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l == n && strncmp(p, name, n) == 0)
			return true;
		if (!e)
			break;
		p = e + 1;
	}
	return false;
}

static int prog_stats(uint32_t id, char *name, uint64_t *cnt, uint64_t *ns)
{
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);
	int fd = bpf_prog_get_fd_by_id(id), r;

	if (fd < 0)
		return -errno;
	r = bpf_obj_get_info_by_fd(fd, &info, &len);
	close(fd);
	if (r < 0)
		return r;
	if (name)
		snprintf(name, BPF_OBJ_NAME_LEN, "%s", info.name);
	*cnt = info.run_cnt;
	*ns = info.run_time_ns;
	return 0;
}

static void collect(const char *pid, const char *names)
{
	char dir[64], path[512], line[256];
	DIR *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "/proc/%s/fdinfo", pid);
	d = opendir(dir);
	if (!d) {
		perror(dir);
		exit(1);
	}
	while ((de = readdir(d))) {
		FILE *f;
		uint32_t id = 0;

		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "prog_id: %" SCNu32, &id) == 1)
				break;
		fclose(f);
		if (!id || n_progs == MAX_PROGS)
			continue;
		struct prog p = {.id = id};
		bool dup = false;

		for (int i = 0; i < n_progs; i++)
			dup |= progs[i].id == id;
		if (dup || prog_stats(id, p.name, &p.cnt0, &p.ns0) < 0 || !wanted(names, p.name))
			continue;
		progs[n_progs++] = p;
	}
	closedir(d);
}

int main(int argc, char **argv)
{
	uint64_t tc = 0, tn = 0;
	int stats_fd, status;
	pid_t child;

	if (argc < 5 || strcmp(argv[3], "--") != 0) {
		fprintf(stderr, "usage: %s PID NAME[,NAME...] -- COMMAND [ARGS...]\n", argv[0]);
		return 2;
	}
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats_fd < 0) {
		fprintf(stderr, "BPF_ENABLE_STATS: %s\n", strerror(errno));
		return 1;
	}
	collect(argv[1], argv[2]);
	child = fork();
	if (child == 0) {
		close(stats_fd);
		execvp(argv[4], argv + 4);
		_exit(127);
	}
	if (child < 0 || waitpid(child, &status, 0) < 0)
		return 1;
	for (int i = 0; i < n_progs; i++) {
		uint64_t c, n;

		if (prog_stats(progs[i].id, NULL, &c, &n) < 0)
			continue;
		c -= progs[i].cnt0;
		n -= progs[i].ns0;
		tc += c;
		tn += n;
		printf("%s runs=%" PRIu64 " ns=%" PRIu64 " ns_per_run=%.1f\n", progs[i].name, c, n,
		       c ? (double)n / (double)c : 0.0);
	}
	printf("total runs=%" PRIu64 " ns=%" PRIu64 " ns_per_run=%.1f\n", tc, tn,
	       tc ? (double)tn / (double)tc : 0.0);
	close(stats_fd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
