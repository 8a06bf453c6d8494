/* SPDX-License-Identifier: MIT */
/*
 * Harness for the network policy's local destinations, driven by tests/integration/netpolicy.sh.
 *   helper_netpolicy [--addr4 A] [--addr6 A] [--add-addr X] RULE...
 * RULE: deny:CIDR[:PORT] | allow:CIDR[:PORT] | default:deny. A and the node's addresses come
 * from getifaddrs (first non-loopback IPv4 / IPv6 global); --addr4/--addr6 name them instead.
 *
 * Listeners (the independent truth): TCP and UDP on [::]:PORT, dual stack, so every local form
 * of the node reaches them. A child in its own unified cgroup, tracked with the policy, tries
 * every form of "the node" over TCP connect, TCP fast open (sendto MSG_FASTOPEN), UDP sendto and
 * UDP connect+send, sending the probe's name. Prints one line per probe:
 *   probe tcp 0.0.0.0 errno 1 reached 0 audit 127.0.0.1 deny
 * errno: what the call returned in the child (0 = success); reached: how many payloads with the
 * probe's name the listeners received; audit: the address and verdict of the probe's connect
 * event ("-" when none). --add-addr X: after the policy programs are loaded, add X/32 to lo
 * (removed at the end), wait until the rtnetlink notification has refreshed the policy's list
 * of node addresses (audit_addr_changed), and probe X too. Exit 0 when it ran (the shell test
 * judges), 1 on a harness failure, 77 when the BPF programs cannot be loaded or no unified
 * hierarchy takes cgroup BPF.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bpf/print.h"
#include "bpf/audit.h"
#include "common/macro.h"

#define TASK_KEY   0xa0d17002ULL
#define MAX_PROBES 64

enum kind { TCP, TFO, UDP, UDPC };
static const char *const kind_name[] = {"tcp", "tfo", "udp", "udpc"};

struct probe {
	enum kind kind;
	char target[INET6_ADDRSTRLEN]; /* address as written by the task */
	char bind[INET6_ADDRSTRLEN];   /* source address bound first, "" = none */
	int err;		       /* in the child */
	int pid;		       /* the process that ran it */
	int events;		       /* connect/sendmsg decisions seen for it */
	int reached;
	char audit_addr[INET6_ADDRSTRLEN];
	char audit_verdict[8];
	int audit_port;
};

static struct probe probes[MAX_PROBES];
static size_t n_probes;
static int port;

static void add(enum kind k, const char *target, const char *bind)
{
	if (n_probes == MAX_PROBES || !*target)
		return;
	probes[n_probes].kind = k;
	snprintf(probes[n_probes].target, sizeof(probes[0].target), "%s", target);
	snprintf(probes[n_probes].bind, sizeof(probes[0].bind), "%s", bind);
	n_probes++;
}

static int to_sa(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, s, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*len = sizeof(*s4);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, s, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*s6);
		return AF_INET6;
	}
	return -1;
}

/* In the child: run one probe; 0 or the errno of the call that failed. */
static int run_probe(const struct probe *p, const char *payload)
{
	struct sockaddr_storage ss, bs;
	socklen_t len, blen;
	int fam = to_sa(p->target, &ss, &len), fd, r = 0;
	bool stream = p->kind == TCP || p->kind == TFO;

	if (fam < 0)
		return EINVAL;
	fd = socket(fam, (stream ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	if (p->bind[0]) {
		if (to_sa(p->bind, &bs, &blen) != fam) {
			close(fd);
			return EINVAL;
		}
		((struct sockaddr_in *)&bs)->sin_port = 0; /* same offset in sockaddr_in6 */
		if (bind(fd, (struct sockaddr *)&bs, blen) < 0) {
			r = errno;
			close(fd);
			return r;
		}
	}
	switch (p->kind) {
	case TCP:
	case UDPC:
		if (connect(fd, (struct sockaddr *)&ss, len) < 0 ||
		    send(fd, payload, strlen(payload), 0) < 0)
			r = errno;
		break;
	case TFO:
	case UDP:
		if (sendto(fd, payload, strlen(payload), p->kind == TFO ? MSG_FASTOPEN : 0,
			   (struct sockaddr *)&ss, len) < 0)
			r = errno;
		break;
	}
	close(fd);
	return r;
}

static void on_ev(const struct audit_event *ev, void *userdata)
{
	size_t *next = userdata;

	if (ev->type != AUDIT_EV_CONNECT || ev->task_key != TASK_KEY)
		return;
	(*next)++;
	/* Each probe runs in its own process: the event's pid says which. The first decision
	 * names the address; the verdict shown is deny if any decision denied. */
	for (size_t i = 0; i < n_probes; i++) {
		struct probe *p = &probes[i];

		if (p->pid != (int)ev->pid)
			continue;
		if (!p->events++)
			snprintf(p->audit_addr, sizeof(p->audit_addr), "%s", ev->connect.address);
		if (!p->audit_verdict[0] || ev->connect.verdict == AUDIT_NET_DENY)
			snprintf(p->audit_verdict, sizeof(p->audit_verdict), "%s",
				 audit_net_action_to_string(ev->connect.verdict));
		p->audit_port = ev->connect.port;
	}
}

static void count_payload(const char *buf, size_t n)
{
	for (size_t i = 0; i < n_probes; i++) {
		char want[96];

		snprintf(want, sizeof(want), "probe-%zu", i);
		if (n == strlen(want) && memcmp(buf, want, n) == 0)
			probes[i].reached++;
	}
}

static void node_addrs(char *a4, char *a6)
{
	struct ifaddrs *ifa = NULL;

	if (getifaddrs(&ifa) < 0)
		return;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET && !*a4) {
			struct in_addr in = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;

			if ((ntohl(in.s_addr) >> 24) != 127)
				inet_ntop(AF_INET, &in, a4, INET6_ADDRSTRLEN);
		} else if (i->ifa_addr->sa_family == AF_INET6 && !*a6) {
			struct in6_addr in = ((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;

			if (!IN6_IS_ADDR_LOOPBACK(&in) && !IN6_IS_ADDR_LINKLOCAL(&in))
				inet_ntop(AF_INET6, &in, a6, INET6_ADDRSTRLEN);
		}
	}
	freeifaddrs(ifa);
}

int main(int argc, char **argv)
{
	struct audit_net_rule rules[AUDIT_NET_RULES_MAX];
	struct audit_net_policy pol = {.default_action = AUDIT_NET_ALLOW, .rules = rules};
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
	socklen_t sl = sizeof(sa);
	char a4[INET6_ADDRSTRLEN] = "", a6[INET6_ADDRSTRLEN] = "", m4[INET6_ADDRSTRLEN + 8] = "";
	char cg[256], err[256], added[INET6_ADDRSTRLEN] = "", cmd[256];
	struct audit *a = NULL;
	int tl = -1, ul = -1, unifd, go[2], done[2], st, r, ai = 1, one = 1;
	size_t next = 0;
	pid_t child;

	libbpf_set_print(bpf_print_env);
	for (; ai + 1 < argc && argv[ai][0] == '-' && argv[ai][1] == '-'; ai += 2) {
		if (!strcmp(argv[ai], "--addr4"))
			snprintf(a4, sizeof(a4), "%s", argv[ai + 1]);
		else if (!strcmp(argv[ai], "--addr6"))
			snprintf(a6, sizeof(a6), "%s", argv[ai + 1]);
		else if (!strcmp(argv[ai], "--add-addr"))
			snprintf(added, sizeof(added), "%s", argv[ai + 1]);
		else
			return 2;
	}
	node_addrs(a4, a6);
	for (; ai < argc; ai++) {
		const char *s = argv[ai];

		if (!strcmp(s, "default:deny")) {
			pol.default_action = AUDIT_NET_DENY;
			continue;
		}
		if (pol.n_rules == ARRAY_SIZE(rules))
			return 2;
		if (!strncmp(s, "deny:", 5) || !strncmp(s, "allow:", 6)) {
			bool deny = s[0] == 'd';
			const char *cidr = s + (deny ? 5 : 6);

			/* "OWN4" / "OWN6" stand for the node's address found above */
			if (!strncmp(cidr, "OWN4", 4))
				cidr = a4;
			else if (!strncmp(cidr, "OWN6", 4))
				cidr = a6;
			r = audit_net_rule_parse(cidr, deny ? AUDIT_NET_DENY : AUDIT_NET_ALLOW,
						 &rules[pol.n_rules], err, sizeof(err));
			if (r < 0) {
				fprintf(stderr, "rule %s: %s\n", s, err);
				return 2;
			}
			pol.n_rules++;
			continue;
		}
		fprintf(stderr, "usage: helper_netpolicy [--addr4 A] [--addr6 A] "
				"deny:CIDR|allow:CIDR|default:deny...\n");
		return 2;
	}
	printf("node address v4 %s v6 %s\n", *a4 ? a4 : "-", *a6 ? a6 : "-");

	r = audit_open(NULL, &a);
	if (r < 0) {
		printf("SKIP: cannot load the audit BPF programs: %s\n", strerror(-r));
		return 77;
	}
	printf("node addresses known to the policy: %zu\n", audit_node_addrs(a, NULL));
	if (added[0]) {
		size_t before = audit_node_addrs(a, NULL);
		struct pollfd pfd = {.fd = audit_addr_fd(a), .events = POLLIN};

		if (pfd.fd < 0) {
			fprintf(stderr, "no rtnetlink socket: %s\n", strerror(-pfd.fd));
			return 1;
		}
		snprintf(cmd, sizeof(cmd), "ip addr add %s/32 dev lo", added);
		if (system(cmd) != 0) {
			fprintf(stderr, "%s failed\n", cmd);
			return 1;
		}
		/* The notification, not a re-read, must bring it in: wait for it (10 s bound). */
		while (audit_node_addrs(a, NULL) == before && poll(&pfd, 1, 10000) == 1)
			(void)audit_addr_changed(a);
		printf("node addresses after adding %s: %zu\n", added, audit_node_addrs(a, NULL));
	}

	tl = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ul = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	(void)setsockopt(tl, IPPROTO_IPV6, IPV6_V6ONLY, &(int){0}, sizeof(int));
	(void)setsockopt(ul, IPPROTO_IPV6, IPV6_V6ONLY, &(int){0}, sizeof(int));
	(void)setsockopt(tl, IPPROTO_TCP, TCP_FASTOPEN, &one, sizeof(one));
	if (tl < 0 || ul < 0 || bind(tl, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(tl, MAX_PROBES) < 0 || getsockname(tl, (struct sockaddr *)&sa, &sl) < 0 ||
	    bind(ul, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("listeners");
		return 1;
	}
	port = ntohs(sa.sin6_port);
	printf("listening on [::]:%d (tcp, udp)\n", port);

	if (*a4)
		snprintf(m4, sizeof(m4), "::ffff:%s", a4);
	for (enum kind k = TCP; k <= UDPC; k++) {
		add(k, "0.0.0.0", "");
		add(k, "::", "");
		add(k, "::ffff:0.0.0.0", "");
		add(k, "127.0.0.1", "");
		add(k, "::1", "");
		add(k, "::ffff:127.0.0.1", "");
		add(k, a4, "");
		add(k, m4, "");
		add(k, a6, "");
		add(k, added, "");
	}
	/* a wildcard from a socket bound to the node's address reaches that address */
	add(TCP, "0.0.0.0", a4);
	add(UDP, "0.0.0.0", a4);

	snprintf(cg, sizeof(cg), "/sys/fs/cgroup/unified/corral-netpolicy-%d", getpid());
	if (mkdir(cg, 0755) < 0) {
		printf("SKIP: no unified hierarchy for cgroup BPF (mkdir %s: %m)\n", cg);
		return 77;
	}
	unifd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (unifd < 0 || pipe2(go, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0) {
		rmdir(cg);
		return 1;
	}
	child = fork();
	if (child == 0) {
		char p[300], c;
		int fd;

		close(go[1]);
		close(done[0]);
		snprintf(p, sizeof(p), "%s/cgroup.procs", cg);
		fd = open(p, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, "0", 1) != 1)
			_exit(126);
		close(fd);
		if (read(go[0], &c, 1) != 1)
			_exit(125);
		for (size_t i = 0; i < n_probes; i++) {
			char payload[96];
			int res[2], pst;
			pid_t g = fork();

			if (g < 0)
				_exit(123);
			if (g == 0) {
				snprintf(payload, sizeof(payload), "probe-%zu", i);
				_exit(run_probe(&probes[i], payload) & 0xff);
			}
			if (waitpid(g, &pst, 0) != g || !WIFEXITED(pst))
				_exit(122);
			res[0] = (int)g;
			res[1] = WEXITSTATUS(pst);
			if (write(done[1], res, sizeof(res)) != sizeof(res))
				_exit(124);
		}
		_exit(0);
	}
	close(go[0]);
	close(done[1]);
	r = audit_track(a, TASK_KEY, child, unifd, &pol);
	if (r < 0) {
		fprintf(stderr, "audit_track: %s\n", strerror(-r));
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		rmdir(cg);
		return 1;
	}
	if (write(go[1], "x", 1) != 1)
		return 1;
	for (size_t i = 0; i < n_probes; i++) {
		int res[2];

		if (read(done[0], res, sizeof(res)) != sizeof(res)) {
			fprintf(stderr, "child stopped after %zu probes\n", i);
			break;
		}
		probes[i].pid = res[0];
		probes[i].err = res[1];
	}
	waitpid(child, &st, 0);

	/* Everything the child sent is queued by now (loopback delivery is synchronous). */
	(void)fcntl(tl, F_SETFL, O_NONBLOCK);
	for (;;) {
		char buf[96];
		int c = accept4(tl, NULL, NULL, SOCK_CLOEXEC);
		ssize_t n;

		if (c < 0)
			break;
		n = recv(c, buf, sizeof(buf), MSG_DONTWAIT);
		if (n > 0)
			count_payload(buf, (size_t)n);
		close(c);
	}
	for (;;) {
		char buf[96];
		ssize_t n = recv(ul, buf, sizeof(buf), MSG_DONTWAIT);

		if (n < 0)
			break;
		count_payload(buf, (size_t)n);
	}
	/* The events were written before each call returned. */
	while (audit_poll(a, on_ev, &next) > 0)
		;
	for (size_t i = 0; i < n_probes; i++) {
		const struct probe *p = &probes[i];

		printf("probe %s %s%s%s errno %d reached %d audit %s %s events %d\n",
		       kind_name[p->kind], p->target, p->bind[0] ? " bound " : "", p->bind, p->err,
		       p->reached, p->audit_addr[0] ? p->audit_addr : "-",
		       p->audit_verdict[0] ? p->audit_verdict : "-", p->events);
	}
	printf("connect events %zu probes %zu\n", next, n_probes);
	(void)next;
	audit_forget(a, TASK_KEY);
	audit_free(a);
	if (added[0]) {
		snprintf(cmd, sizeof(cmd), "ip addr del %s/32 dev lo", added);
		if (system(cmd) != 0)
			fprintf(stderr, "%s failed\n", cmd);
	}
	close(unifd);
	rmdir(cg);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
