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
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/config.h"
#include "agent/energy.h"
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

static void zone(const char *root, const char *z, const char *name, const char *max, const char *uj)
{
	char dir[256];

	snprintf(dir, sizeof(dir), "%s/%s", root, z);
	assert_int_equal(mkdir(dir, 0755), 0);
	write_file(dir, "name", name);
	write_file(dir, "max_energy_range_uj", max);
	write_file(dir, "energy_uj", uj);
}

static void set_uj(const char *root, const char *z, const char *uj)
{
	char dir[256];

	snprintf(dir, sizeof(dir), "%s/%s", root, z);
	write_file(dir, "energy_uj", uj);
}

/* A stand-in powercap tree: two packages (one wraps), a DRAM zone, and zones that are not
 * counted (core inside a package, psys, an MMIO zone); the joules checked against the sums
 * of the steps written here. */
static void test_energy(void **state)
{
	char root[] = "/tmp/test_node_energy.XXXXXX", cmd[128];
	struct energy_meter m;
	double j[_ENERGY_KIND_MAX];

	(void)state;
	assert_non_null(mkdtemp(root));
	assert_int_equal(energy_open(root, &m), -ENOENT); /* no zone */
	zone(root, "intel-rapl:0", "package-0\n", "262143328850\n", "1000000\n");
	zone(root, "intel-rapl:0:0", "core\n", "262143328850\n", "500\n");
	zone(root, "intel-rapl:0:1", "dram\n", "65712999613\n", "2000\n");
	zone(root, "intel-rapl:1", "package-1\n", "1000000\n", "990000\n");
	zone(root, "intel-rapl:2", "psys\n", "262143328850\n", "7\n");
	zone(root, "intel-rapl-mmio:0", "package-0\n", "262143328850\n", "7\n");
	assert_int_equal(energy_open(root, &m), 0);
	assert_int_equal(m.n, 3);
	assert_int_equal(energy_read(&m, j), 0);
	assert_true(j[ENERGY_PACKAGE] == 0 && j[ENERGY_DRAM] == 0);
	/* package-0 +2.5 J, package-1 wraps at 1 J: 10000 uJ to the top, 30000 after, dram
	 * +0.75 J; core and psys move but are not counted */
	set_uj(root, "intel-rapl:0", "3500000\n");
	set_uj(root, "intel-rapl:1", "30000\n");
	set_uj(root, "intel-rapl:0:1", "752000\n");
	set_uj(root, "intel-rapl:0:0", "999999\n");
	set_uj(root, "intel-rapl:2", "999999\n");
	assert_int_equal(energy_read(&m, j), 0);
	assert_float_equal(j[ENERGY_PACKAGE], 2.5 + 0.04, 1e-12);
	assert_float_equal(j[ENERGY_DRAM], 0.75, 1e-12);
	/* nothing moved: 0; an unreadable zone: -EIO, the others still counted */
	assert_int_equal(energy_read(&m, j), 0);
	assert_true(j[ENERGY_PACKAGE] == 0 && j[ENERGY_DRAM] == 0);
	set_uj(root, "intel-rapl:0", "garbage\n");
	set_uj(root, "intel-rapl:1", "130000\n");
	assert_int_equal(energy_read(&m, j), -EIO);
	assert_float_equal(j[ENERGY_PACKAGE], 0.1, 1e-12);
	set_uj(root, "intel-rapl:0", "4500000\n"); /* its last good value was 3500000 */
	assert_int_equal(energy_read(&m, j), 0);
	assert_float_equal(j[ENERGY_PACKAGE], 1.0, 1e-12);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_node_config),
	    cmocka_unit_test(test_proc_read),
	    cmocka_unit_test(test_energy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
