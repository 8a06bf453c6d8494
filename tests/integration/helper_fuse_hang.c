/* SPDX-License-Identifier: MIT */
/*
 * helper_fuse_hang MOUNTPOINT UID GID: mounts a FUSE filesystem (raw /dev/fuse, no library) at
 * MOUNTPOINT, owned by UID:GID with allow_other (what fusermount does for a user when
 * user_allow_other is set), answers the kernel's INIT and then never answers anything else:
 * every access below MOUNTPOINT, a stat of it included, waits (killable only). Prints "ready"
 * once mounted, then waits for SIGTERM/SIGINT: closing /dev/fuse aborts the connection (the
 * waiting calls fail with ENOTCONN) and the mount is detached. Needs root.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/uio.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* Read requests until INIT, answer it; other requests (none before INIT) are left waiting. */
static int answer_init(int fd)
{
	static char buf[FUSE_MIN_READ_BUFFER + 65536];

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		struct fuse_in_header *in = (struct fuse_in_header *)buf;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < (ssize_t)sizeof(*in))
			return -1;
		if (in->opcode != FUSE_INIT)
			continue;
		const struct fuse_init_in *ii = (const struct fuse_init_in *)(in + 1);
		struct fuse_out_header oh = {.unique = in->unique};
		struct fuse_init_out io = {
		    .major = FUSE_KERNEL_VERSION,
		    .minor = ii->minor < FUSE_KERNEL_MINOR_VERSION ? ii->minor
								   : FUSE_KERNEL_MINOR_VERSION,
		    .max_readahead = ii->max_readahead,
		    .max_write = 4096,
		};
		struct iovec iov[2] = {{&oh, sizeof(oh)}, {&io, sizeof(io)}};

		oh.len = (uint32_t)(sizeof(oh) + sizeof(io));
		return writev(fd, iov, 2) < 0 ? -1 : 0;
	}
}

int main(int argc, char **argv)
{
	char opts[256];
	struct sigaction sa = {.sa_handler = on_signal};
	int fd;

	if (argc != 4) {
		fprintf(stderr, "usage: %s MOUNTPOINT UID GID\n", argv[0]);
		return 2;
	}
	fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("/dev/fuse");
		return 77;
	}
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40755,user_id=%s,group_id=%s,allow_other", fd,
		 argv[2], argv[3]);
	if (mount("corral-hang", argv[1], "fuse.corral-hang", MS_NOSUID | MS_NODEV, opts) < 0) {
		perror("mount");
		return 77;
	}
	if (answer_init(fd) < 0) {
		perror("FUSE INIT");
		umount2(argv[1], MNT_DETACH);
		return 1;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("ready\n");
	fflush(stdout);
	while (!stop)
		pause();
	close(fd); /* aborts the connection: every waiting call returns ENOTCONN */
	umount2(argv[1], MNT_DETACH);
	return 0;
}
