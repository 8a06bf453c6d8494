/* SPDX-License-Identifier: MIT */
/*
 * helper_sandbox PROFILE -- CMD ARGS...
 * Loads PROFILE (built-in name, or a path) with sbx_profile_load, forks, sets no_new_privs,
 * installs the filter and execs CMD. Prints how the child ended on stderr
 * ("helper_sandbox: exited 0", "helper_sandbox: signaled 31 (SIGSYS)") and exits with the
 * child's code, or 128+signal.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "isolation/seccomp.h"

int main(int argc, char **argv)
{
	struct sbx_filter *f = NULL;
	char err[512] = "";
	int r, st;
	pid_t pid;

	if (argc < 4 || strcmp(argv[2], "--") != 0) {
		fprintf(stderr, "usage: %s PROFILE -- CMD ARGS...\n", argv[0]);
		return 2;
	}
	r = sbx_profile_load(argv[1], NULL, &f, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "helper_sandbox: profile %s: %s (%s)\n", argv[1], err,
			strerror(-r));
		return 2;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
			_exit(126);
		r = sbx_filter_apply(f);
		if (r < 0) {
			dprintf(2, "helper_sandbox: seccomp: %s\n", strerror(-r));
			_exit(126);
		}
		execvp(argv[3], argv + 3);
		dprintf(2, "helper_sandbox: exec %s: %s\n", argv[3], strerror(errno));
		_exit(127);
	}
	sbx_filter_free(f);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			perror("waitpid");
			return 2;
		}
	if (WIFSIGNALED(st)) {
		fprintf(stderr, "helper_sandbox: signaled %d (SIG%s)\n", WTERMSIG(st),
			sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
		return 128 + WTERMSIG(st);
	}
	fprintf(stderr, "helper_sandbox: exited %d\n", WEXITSTATUS(st));
	return WEXITSTATUS(st);
}
