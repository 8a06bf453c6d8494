/* SPDX-License-Identifier: MIT */
/* Node records, agent side: the [node] section, and procfs read from a stand-in tree. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/config.h"
#include "agent/node_sample.h"
#include "common/macro.h"

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int load(struct agent_config *c, const char *text, char *err, size_t errlen)
{
	char path[] = "/tmp/test_node_sample.conf.XXXXXX";
	int fd = mkstemp(path), r;
	FILE *f;

	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	r = config_load(c, path, err, errlen);
	unlink(path);
	return r;
}

static void test_node_config(void **state)
{
	static const struct {
		const char *text, *err;
	} bad[] = {
	    {"[node]\nprice_class = gpu h100\n", "[node] price_class: expected letters"},
	    {"[node]\nprice_class = \n", "[node] price_class: expected 1-63"},
	    {"[node]\nlabels = rack\n", "[node] labels: expected key=value"},
	    {"[node]\nlabels = rack=1,rack=2\n", "[node] labels: expected key=value"},
	    {"[node]\nlabels = =1\n", "[node] labels: expected key=value"},
	    {"[node]\nlabels = a=1, b=2\n", "[node] labels: expected key=value"},
	    {"[node]\nzone = eu\n", "[node] zone: unknown key"},
	};
	struct agent_config c;
	char err[512];

	(void)state;
	config_init_defaults(&c);
	assert_int_equal(load(&c, "[node]\nprice_class = gpu-h100.v2\nlabels = rack=r7,zone=\n",
			      err, sizeof(err)),
			 0);
	assert_string_equal(c.node_price_class, "gpu-h100.v2");
	assert_string_equal(c.node_labels, "rack=r7,zone=");
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		err[0] = 0;
		assert_int_equal(load(&c, bad[i].text, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].err))
			fail_msg("case %zu: \"%s\" does not contain \"%s\"", i, err, bad[i].err);
	}
	config_free(&c);
}

static void test_proc_read(void **state)
{
	char dir[] = "/tmp/test_node_sample.XXXXXX", cmd[128];
	struct node_proc p = {0};
	long hz = sysconf(_SC_CLK_TCK);

	(void)state;
	assert_non_null(mkdtemp(dir));
	/* busy = user + nice + system + irq + softirq + steal = 100+2+30+4+5+6 jiffies */
	write_file(dir, "stat",
		   "cpu  100 2 30 5000 70 4 5 6 0 0\ncpu0 50 1 15 2500 35 2 2 3 0 0\n");
	write_file(dir, "meminfo",
		   "MemTotal:       16000 kB\nMemFree:         1000 kB\n"
		   "MemAvailable:    4000 kB\nBuffers:          100 kB\n");
	assert_int_equal(node_proc_read(dir, &p), 0);
	assert_int_equal(p.busy_ns, 147ULL * (NSEC_PER_SEC / (uint64_t)(hz > 0 ? hz : 100)));
	assert_int_equal(p.mem_total_bytes, 16000ULL * 1024);
	assert_int_equal(p.mem_used_bytes, 12000ULL * 1024);
	/* a meminfo without MemAvailable, a stat that is not one: refused, not guessed */
	write_file(dir, "meminfo", "MemTotal:       16000 kB\n");
	assert_int_equal(node_proc_read(dir, &p), -EBADMSG);
	write_file(dir, "stat", "intr 1 2 3\n");
	assert_int_equal(node_proc_read(dir, &p), -EBADMSG);
	assert_int_equal(node_proc_read("/nonexistent-proc", &p), -ENOENT);
	/* the real one */
	assert_int_equal(node_proc_read("/proc", &p), 0);
	assert_true(p.mem_total_bytes > 0 && p.mem_used_bytes <= p.mem_total_bytes);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_node_config),
	    cmocka_unit_test(test_proc_read),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
