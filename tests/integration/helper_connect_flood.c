/* SPDX-License-Identifier: MIT */
/*
 * helper_connect_flood N PORT: N times socket(); connect(127.0.0.1:PORT); close(), as fast as
 * it can (a refused connect is fine: the agent audits the attempt). Prints the number of
 * connect() calls made, the figure the record-budget test checks the records against.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	unsigned long n, done = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: %s N PORT\n", argv[0]);
		return 2;
	}
	n = strtoul(argv[1], NULL, 10);
	sa.sin_port = htons((uint16_t)strtoul(argv[2], NULL, 10));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (unsigned long i = 0; i < n; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			perror("socket");
			return 1;
		}
		(void)connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		done++;
		close(fd);
	}
	printf("%lu\n", done);
	fflush(stdout); /* the count is out even if a sanitizer's exit handler fails later */
	return 0;
}
