// SPDX-License-Identifier: MIT
/*
 * Drives the GPU library parts for tests/integration/gpu_limits.sh (and tests/gpu/device-check.sh):
 *   cuda-run LIBCUDA LIMIT_BYTES -- CMD...   load bpf/cuda, attach to LIBCUDA, run CMD as a
 *                                           tracked task with that GPU memory limit, print its
 *                                           wait status and the BPF counters (key=value)
 *   v1-run CGDIR MINORS UVM -- CMD...        apply the v1 device policy to a devices cgroup
 *                                           dir, run CMD inside it
 *   bpf-run CGDIR MINORS UVM -- CMD...       attach the cgroup_device program to a unified
 *                                           cgroup dir, run CMD inside it, print denials
 *   bpf-attach CGDIR MINORS UVM              attach and exit (the attachment outlives us)
 *   nvml [PID...]                            inventory from the real (or $CORRAL_NVML_LIBRARY)
 *                                           NVML; with PIDs, one sample summed over them
 *   find-libcuda                             the libcuda.so.1 the dynamic loader picks
 *   open PATH...                             open each path O_RDWR, print "PATH OK|E<NAME>"
 *   uvm-major FILE                           nvidia-uvm major from a /proc/devices-style file
 * MINORS: comma-separated allowed GPU minors, or "-" for none. UVM: nvidia-uvm major or 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bpf/cuda.h"
#include "bpf/meter.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/parse.h"
#include "bpf/devices.h"
#include "isolation/devices.h"
#include "isolation/gpu.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

static int usage(void)
{
	fprintf(stderr, "usage: helper_gpucheck cuda-run|v1-run|bpf-run|open|uvm-major ...\n");
	return 2;
}

static char **after_dashes(int argc, char **argv, int from)
{
	for (int i = from; i < argc; i++)
		if (strcmp(argv[i], "--") == 0 && i + 1 < argc)
			return &argv[i + 1];
	return NULL;
}

static void print_status(int st)
{
	if (WIFEXITED(st))
		printf("exit=code:%d\n", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		printf("exit=signal:%d\n", WTERMSIG(st));
	else
		printf("exit=other:%d\n", st);
	fflush(stdout);
}

/* Fork CMD; the child waits on a pipe until the parent has set things up (pre()), then joins
 * join_dir/cgroup.procs if given and execs. Returns the wait status. */
static int run_child(char **cmd, const char *join_dir, int (*pre)(pid_t, void *), void *data)
{
	int go[2], st;
	pid_t pid;
	char c = 0;

	if (pipe2(go, O_CLOEXEC) < 0)
		return -errno;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(126);
		if (join_dir) {
			_cleanup_close_ int d = open(join_dir, O_DIRECTORY | O_CLOEXEC);
			if (d < 0 || write_file_at(d, "cgroup.procs", "0") < 0) {
				fprintf(stderr, "helper_gpucheck: join %s failed\n", join_dir);
				_exit(125);
			}
		}
		execvp(cmd[0], cmd);
		fprintf(stderr, "helper_gpucheck: exec %s: %s\n", cmd[0], strerror(errno));
		_exit(127);
	}
	close(go[0]);
	if (pre && pre(pid, data) < 0) {
		kill(pid, SIGKILL);
		close(go[1]);
		waitpid(pid, &st, 0);
		return -EIO;
	}
	if (write(go[1], "x", 1) != 1)
		return -errno;
	close(go[1]);
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	return st;
}

struct cuda_ctx {
	struct cuda_meter *c;
	uint64_t limit;
};

static int cuda_pre(pid_t pid, void *data)
{
	struct cuda_ctx *x = data;
	int r = cuda_track(x->c, 1, pid, x->limit);
	if (r < 0)
		fprintf(stderr, "cuda_track: %s\n", strerror(-r));
	return r;
}

static int cmd_cuda_run(int argc, char **argv)
{
	struct cuda_opts o = {0};
	struct meter *m = NULL;
	struct cuda_ctx x = {};
	struct cuda_usage u;
	char **cmd = after_dashes(argc, argv, 4);
	int r, st;

	if (argc < 6 || !cmd || parse_u64(argv[3], &x.limit) < 0)
		return usage();
	if (getenv("CORRAL_TEST_CUDA_SHARE")) {
		/* as corrald loads them: the uprobes use the meter's membership map */
		struct bpf_map_info mi = {}, ci = {};
		uint32_t len = sizeof(mi);

		r = meter_open(NULL, &m);
		if (r < 0) {
			fprintf(stderr, "meter_open: %s\n", strerror(-r));
			return 1;
		}
		o.share_members = true;
		o.members_fd = meter_members_fd(m);
		r = cuda_open(&o, &x.c);
		if (r < 0) {
			fprintf(stderr, "cuda_open (shared): %s\n", strerror(-r));
			meter_free(m);
			return 1;
		}
		(void)bpf_obj_get_info_by_fd(meter_members_fd(m), &mi, &len);
		len = sizeof(ci);
		(void)bpf_obj_get_info_by_fd(cuda_members_fd(x.c), &ci, &len);
		printf("members shared=%d same_map=%d\n", cuda_members_shared(x.c),
		       mi.id != 0 && mi.id == ci.id);
	} else {
		r = cuda_open(NULL, &x.c);
	}
	if (r < 0) {
		fprintf(stderr, "cuda_open: %s\n", strerror(-r));
		return 1;
	}
	r = cuda_attach_library(x.c, argv[2]);
	if (r < 0) {
		fprintf(stderr, "cuda_attach_library %s: %s\n", argv[2], strerror(-r));
		cuda_free(x.c);
		meter_free(m);
		return 1;
	}
	printf("probes=%d\n", r);
	st = run_child(cmd, NULL, cuda_pre, &x);
	if (st < 0) {
		fprintf(stderr, "run: %s\n", strerror(-st));
		cuda_free(x.c);
		meter_free(m);
		return 1;
	}
	print_status(st);
	r = cuda_read(x.c, 1, &u);
	if (r < 0) {
		fprintf(stderr, "cuda_read: %s\n", strerror(-r));
		cuda_free(x.c);
		meter_free(m);
		return 1;
	}
	printf("limit_bytes=%llu\ncurrent_bytes=%llu\npeak_bytes=%llu\nalloc_bytes=%llu\n"
	       "alloc_calls=%llu\nfree_bytes=%llu\nfree_calls=%llu\nlaunches=%llu\n"
	       "htod_bytes=%llu\ndtoh_bytes=%llu\nuntracked=%llu\nlimit_fired=%d\n"
	       "killed_tgid=%u\nkilled_request_bytes=%llu\nchild_tgid_matches=%d\n",
	       (unsigned long long)u.limit_bytes, (unsigned long long)u.current_bytes,
	       (unsigned long long)u.peak_bytes, (unsigned long long)u.alloc_bytes,
	       (unsigned long long)u.alloc_calls, (unsigned long long)u.free_bytes,
	       (unsigned long long)u.free_calls, (unsigned long long)u.launches,
	       (unsigned long long)u.memcpy_htod_bytes, (unsigned long long)u.memcpy_dtoh_bytes,
	       (unsigned long long)u.untracked, u.limit_fired, u.killed_tgid,
	       (unsigned long long)u.killed_request_bytes, 1);
	r = cuda_forget(x.c, 1);
	printf("forget=%d read_after_forget=%d\n", r, cuda_read(x.c, 1, &u));
	{
		/* membership entries of the task left in the (shared or own) map */
		int fd = cuda_members_fd(x.c), left = 0;
		uint32_t k, nk;
		bool first = true;
		uint64_t v[4];

		while (bpf_map_get_next_key(fd, first ? NULL : &k, &nk) == 0) {
			first = false;
			k = nk;
			if (bpf_map_lookup_elem(fd, &k, v) == 0 && v[0] == 1)
				left++;
		}
		printf("members_left=%d\n", left);
	}
	cuda_free(x.c);
	meter_free(m);
	return 0;
}

static int parse_policy(const char *minors, const char *uvm, struct devices_policy *p)
{
	uint32_t major;
	_cleanup_free_ char *copy = strdup(minors);
	char *save = NULL;

	if (!copy || parse_u32(uvm, &major) < 0)
		return -EINVAL;
	devices_policy_init(p, major);
	if (strcmp(minors, "-") == 0)
		return 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint32_t m;
		if (parse_u32(t, &m) < 0 || devices_policy_allow_minor(p, m) < 0)
			return -EINVAL;
	}
	return 0;
}

static int cmd_bpf_attach(int argc, char **argv)
{
	_cleanup_close_ int dfd = -1;
	struct devices_policy p;
	struct devices_prog *prog = NULL;
	int r;

	if (argc != 5 || parse_policy(argv[3], argv[4], &p) < 0)
		return usage();
	dfd = open(argv[2], O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "open %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	r = devices_bpf_attach(dfd, &p, &prog);
	if (r < 0) {
		fprintf(stderr, "devices_bpf_attach: %s\n", strerror(-r));
		return 1;
	}
	devices_bpf_free(prog);
	printf("attached=persistent\n");
	return 0;
}

static int cmd_dev_run(int argc, char **argv, bool bpf)
{
	_cleanup_close_ int dfd = -1;
	struct devices_policy p;
	struct devices_prog *prog = NULL;
	char **cmd = after_dashes(argc, argv, 5);
	int r, st;

	if (argc < 7 || !cmd || parse_policy(argv[3], argv[4], &p) < 0)
		return usage();
	dfd = open(argv[2], O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "open %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	r = bpf ? devices_bpf_attach(dfd, &p, &prog) : devices_v1_apply(dfd, &p);
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", bpf ? "devices_bpf_attach" : "devices_v1_apply",
			strerror(-r));
		return 1;
	}
	printf("applied=%s\n", bpf ? "bpf" : "v1");
	st = run_child(cmd, argv[2], NULL, NULL);
	if (st < 0) {
		fprintf(stderr, "run: %s\n", strerror(-st));
		devices_bpf_free(prog);
		return 1;
	}
	print_status(st);
	if (bpf) {
		printf("denials=%llu\n", (unsigned long long)devices_bpf_denials(prog));
		r = devices_bpf_detach(prog);
		printf("detach=%d\n", r);
		devices_bpf_free(prog);
	}
	return 0;
}

static int cmd_nvml(int argc, char **argv)
{
	struct gpu_inventory *inv = NULL;
	struct gpu_request req = {};
	struct gpu_allocation a;
	struct gpu_meter *m = NULL;
	struct gpu_usage u;
	pid_t pids[64];
	size_t n = 0;
	char *env[2];
	size_t n_env = 0;
	int r;

	r = gpu_open(NULL, &inv);
	if (r < 0)
		return 1;
	if (!gpu_enabled(inv)) {
		printf("gpu=off reason=%s\n", gpu_off_reason(inv));
		gpu_free(inv);
		return 3;
	}
	printf("gpus=%zu\n", gpu_count(inv));
	for (size_t i = 0; i < gpu_count(inv); i++) {
		const struct gpu_device *d = gpu_device(inv, i);
		printf("gpu %u uuid=%s minor=%u memory=%llu mig=%d energy=%d name=%s\n", d->index,
		       d->uuid, d->minor, (unsigned long long)d->memory_total, d->mig_enabled,
		       d->energy_supported, d->name);
	}
	for (int i = 2; i < argc && n < ARRAY_SIZE(pids); i++) {
		int pid;
		if (parse_int(argv[i], &pid) < 0 || pid <= 0)
			return usage();
		pids[n++] = pid;
	}
	req.count = gpu_free_count(inv);
	r = gpu_alloc(inv, 1, &req, &a);
	if (r < 0) {
		fprintf(stderr, "gpu_alloc: %s\n", strerror(-r));
		gpu_free(inv);
		return 1;
	}
	if (gpu_env(inv, &a, env, &n_env) == 0 && n_env == 2) {
		printf("%s\n%s\n", env[0], env[1]);
		free(env[0]);
		free(env[1]);
	}
	if (n) {
		r = gpu_meter_new(inv, &a, 0, now_ns(CLOCK_MONOTONIC), &m);
		if (r >= 0)
			r = gpu_meter_sample(inv, m, pids, n, now_ns(CLOCK_MONOTONIC));
		if (r < 0) {
			fprintf(stderr, "gpu_meter: %s\n", strerror(-r));
			gpu_meter_free(m);
			gpu_free(inv);
			return 1;
		}
		gpu_meter_usage(m, now_ns(CLOCK_MONOTONIC), &u);
		printf("nvml_memory_bytes=%llu\nnvml_util=%.1f\nsamples=%llu\n",
		       (unsigned long long)u.memory_current_bytes, u.util_avg,
		       (unsigned long long)u.samples);
		gpu_meter_free(m);
	}
	gpu_free(inv);
	return 0;
}

static int cmd_open(int argc, char **argv)
{
	for (int i = 2; i < argc; i++) {
		int fd = open(argv[i], O_RDWR | O_CLOEXEC | O_NOCTTY);
		if (fd >= 0) {
			printf("%s OK\n", argv[i]);
			close(fd);
		} else {
			printf("%s %s\n", argv[i], strerrorname_np(errno));
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	unsigned uvm;
	int r;

	if (argc < 2)
		return usage();
	if (!getenv("CORRAL_TEST_LIBBPF_VERBOSE"))
		libbpf_set_print(NULL); /* optional probes that are absent are not errors */
	if (strcmp(argv[1], "cuda-run") == 0)
		return cmd_cuda_run(argc, argv);
	if (strcmp(argv[1], "v1-run") == 0)
		return cmd_dev_run(argc, argv, false);
	if (strcmp(argv[1], "bpf-run") == 0)
		return cmd_dev_run(argc, argv, true);
	if (strcmp(argv[1], "nvml") == 0)
		return cmd_nvml(argc, argv);
	if (strcmp(argv[1], "find-libcuda") == 0) {
		char path[4096];
		r = cuda_find_library(path, sizeof(path));
		if (r < 0) {
			fprintf(stderr, "cuda_find_library: %s\n", strerror(-r));
			return 1;
		}
		printf("%s\n", path);
		return 0;
	}
	if (strcmp(argv[1], "bpf-attach") == 0)
		return cmd_bpf_attach(argc, argv);
	if (strcmp(argv[1], "open") == 0)
		return cmd_open(argc, argv);
	if (strcmp(argv[1], "uvm-major") == 0 && argc == 3) {
		r = devices_read_uvm_major(argv[2], &uvm);
		if (r < 0) {
			fprintf(stderr, "devices_read_uvm_major: %s\n", strerror(-r));
			return 1;
		}
		printf("uvm_major=%u\n", uvm);
		return 0;
	}
	return usage();
}
