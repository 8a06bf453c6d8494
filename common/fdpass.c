// SPDX-License-Identifier: MIT
#include "common/fdpass.h"

#include <errno.h>
#include <string.h>

int fdpass_attach(struct msghdr *mh, void *buf, size_t buflen, const int *fds, size_t nfds)
{
	struct cmsghdr *c;

	if (nfds == 0 || buflen < FDPASS_SPACE(nfds))
		return -EINVAL;
	memset(buf, 0, FDPASS_SPACE(nfds));
	mh->msg_control = buf;
	mh->msg_controllen = FDPASS_SPACE(nfds);
	c = CMSG_FIRSTHDR(mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	return 0;
}
