/* SPDX-License-Identifier: MIT */
/*
 * corral-spawn: the launch spawner corrald starts once (isolation/spawner.c). It forks each
 * task's shim from itself, a process with few mappings, instead of from the agent. fd 3 is its
 * end of the socket from corrald; it exits when corrald closes it (running shims stay).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "isolation/launch.h"

int main(int argc, char **argv)
{
	struct stat st;
	int r;

	(void)argv;
	if (argc != 1 || fstat(3, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		fprintf(stderr, "corral-spawn: started by corrald only (fd 3: its socket)\n");
		return 2;
	}
	(void)prctl(PR_SET_NAME, "corral-spawn", 0, 0, 0);
	/* Nothing else of corrald's (its fds are close-on-exec; this is a second line). */
	(void)syscall(SYS_close_range, 4U, ~0U, 0);
	r = launch_spawner_serve(3);
	if (r < 0) {
		fprintf(stderr, "corral-spawn: %s\n", strerror(-r));
		return 1;
	}
	return 0;
}
