/* SPDX-License-Identifier: MIT */
#pragma once
#include <stddef.h>
#include <sys/socket.h>

/* The control buffer for up to n descriptors, aligned as a cmsghdr. */
#define FDPASS_SPACE(n) CMSG_SPACE(sizeof(int) * (n))

/*
 * mh's control message: the nfds descriptors fds (SCM_RIGHTS), in buf of buflen bytes (at least
 * FDPASS_SPACE(nfds), aligned for a cmsghdr). Returns 0, or -EINVAL when they do not fit.
 */
int fdpass_attach(struct msghdr *mh, void *buf, size_t buflen, const int *fds, size_t nfds);
