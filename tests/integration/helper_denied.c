/* SPDX-License-Identifier: MIT */
/*
 * helper_denied N [DIR ROUNDS]
 * Makes N ptrace(PTRACE_TRACEME) calls (denied with EPERM by the default seccomp profile) and
 * checks that each fails with EPERM. With DIR and ROUNDS: does that ROUNDS times; after round i
 * it creates DIR/done.i and waits until DIR/go.i exists (the test restarts the agent in
 * between). Prints the number of EPERM answers; exits 0 when every call got EPERM, 1 if one did
 * not, 2 on bad usage or a wait that never ended (60 s).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int wait_for(const char *path)
{
	struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};
	struct stat st;

	for (int i = 0; i < 6000; i++) {
		if (stat(path, &st) == 0)
			return 0;
		nanosleep(&ts, NULL);
	}
	return -1;
}

int main(int argc, char **argv)
{
	long n, rounds = 1, eperm = 0, other = 0;
	const char *dir = NULL;

	if (argc != 2 && argc != 4) {
		fprintf(stderr, "usage: %s N [DIR ROUNDS]\n", argv[0]);
		return 2;
	}
	n = strtol(argv[1], NULL, 10);
	if (argc == 4) {
		dir = argv[2];
		rounds = strtol(argv[3], NULL, 10);
	}
	if (n < 0 || rounds < 1)
		return 2;
	for (long r = 1; r <= rounds; r++) {
		char path[4096];
		int fd;

		for (long i = 0; i < n; i++) {
			if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) == -1 && errno == EPERM)
				eperm++;
			else
				other++;
		}
		if (!dir)
			break;
		snprintf(path, sizeof(path), "%s/done.%ld", dir, r);
		fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
		if (fd < 0)
			return 2;
		close(fd);
		if (r == rounds)
			break;
		snprintf(path, sizeof(path), "%s/go.%ld", dir, r);
		if (wait_for(path) < 0)
			return 2;
	}
	printf("%ld\n", eperm);
	return other ? 1 : 0;
}
