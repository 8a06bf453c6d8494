// SPDX-License-Identifier: MIT
/*
 * A small CUDA driver API program loaded through dlopen, for the GPU tests: with the stand-in
 * $(O)/tests/gpu/libcuda.so.1 here, with the real libcuda.so.1 on a GPU machine
 * (tests/gpu/device-check.sh). It initialises a context, loads a one-line PTX kernel, allocates
 * TOTAL MiB in STEP MiB allocations (printing each step before the next one), copies 4 KiB to
 * the device, launches the kernel LAUNCHES times, copies 4 KiB back, frees everything.
 *
 *   helper_cudaapp LIBCUDA TOTAL_MIB STEP_MIB LAUNCHES [--verify] [--hold]
 *     --verify  check the kernel's output (real GPU only: the stand-in kernels do nothing)
 *     --hold    after the kernels, print "holding" and wait for a line (or EOF) on stdin
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;

/* fill(p, v): p[threadIdx.x] = v */
static const char ptx[] = ".version 6.0\n"
			  ".target sm_50\n"
			  ".address_size 64\n"
			  ".visible .entry fill(.param .u64 p, .param .u32 v)\n"
			  "{\n"
			  "  .reg .b32 %r<3>;\n"
			  "  .reg .b64 %rd<4>;\n"
			  "  ld.param.u64 %rd1, [p];\n"
			  "  ld.param.u32 %r1, [v];\n"
			  "  cvta.to.global.u64 %rd2, %rd1;\n"
			  "  mov.u32 %r2, %tid.x;\n"
			  "  mul.wide.u32 %rd3, %r2, 4;\n"
			  "  add.s64 %rd2, %rd2, %rd3;\n"
			  "  st.global.u32 [%rd2], %r1;\n"
			  "  ret;\n"
			  "}\n";

#define MAX_STEPS  4096
#define COPY_BYTES 4096
#define THREADS	   256

static struct {
	CUresult (*Init)(unsigned);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*CtxCreate)(CUcontext *, unsigned, CUdevice);
	CUresult (*CtxDestroy)(CUcontext);
	CUresult (*CtxSynchronize)(void);
	CUresult (*ModuleLoadData)(CUmodule *, const void *);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
				 unsigned, unsigned, CUstream, void **, void **);
} cu;

static void *need(void *h, const char *name)
{
	void *p = dlsym(h, name);
	if (!p) {
		fprintf(stderr, "helper_cudaapp: %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

#define CHECK(call)                                                                                \
	do {                                                                                       \
		CUresult _r = (call);                                                              \
		if (_r != 0) {                                                                     \
			fprintf(stderr, "helper_cudaapp: %s failed: %d\n", #call, _r);             \
			exit(3);                                                                   \
		}                                                                                  \
	} while (0)

int main(int argc, char **argv)
{
	static CUdeviceptr ptrs[MAX_STEPS];
	uint32_t host[COPY_BYTES / 4], val = 0xC0FFEE;
	unsigned long total, step, launches, n;
	int verify = 0, hold = 0;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUdevice dev;
	void *h;

	if (argc < 5) {
		fprintf(stderr, "usage: helper_cudaapp LIBCUDA TOTAL_MIB STEP_MIB LAUNCHES "
				"[--verify] [--hold]\n");
		return 2;
	}
	total = strtoul(argv[2], NULL, 10);
	step = strtoul(argv[3], NULL, 10);
	launches = strtoul(argv[4], NULL, 10);
	for (int i = 5; i < argc; i++) {
		verify |= strcmp(argv[i], "--verify") == 0;
		hold |= strcmp(argv[i], "--hold") == 0;
	}
	if (step == 0 || total % step || total / step > MAX_STEPS) {
		fprintf(stderr, "helper_cudaapp: TOTAL must be a multiple of STEP (<= %d steps)\n",
			MAX_STEPS);
		return 2;
	}
	n = total / step;
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "helper_cudaapp: %s\n", dlerror());
		return 2;
	}
	*(void **)&cu.Init = need(h, "cuInit");
	*(void **)&cu.DeviceGet = need(h, "cuDeviceGet");
	*(void **)&cu.CtxCreate = need(h, "cuCtxCreate_v2");
	*(void **)&cu.CtxDestroy = need(h, "cuCtxDestroy_v2");
	*(void **)&cu.CtxSynchronize = need(h, "cuCtxSynchronize");
	*(void **)&cu.ModuleLoadData = need(h, "cuModuleLoadData");
	*(void **)&cu.ModuleGetFunction = need(h, "cuModuleGetFunction");
	*(void **)&cu.MemAlloc = need(h, "cuMemAlloc_v2");
	*(void **)&cu.MemFree = need(h, "cuMemFree_v2");
	*(void **)&cu.MemcpyHtoD = need(h, "cuMemcpyHtoD_v2");
	*(void **)&cu.MemcpyDtoH = need(h, "cuMemcpyDtoH_v2");
	*(void **)&cu.LaunchKernel = need(h, "cuLaunchKernel");

	CHECK(cu.Init(0));
	CHECK(cu.DeviceGet(&dev, 0));
	CHECK(cu.CtxCreate(&ctx, 0, dev));
	CHECK(cu.ModuleLoadData(&mod, ptx));
	CHECK(cu.ModuleGetFunction(&fn, mod, "fill"));
	printf("pid %d\n", (int)getpid());
	for (unsigned long i = 0; i < n; i++) {
		CHECK(cu.MemAlloc(&ptrs[i], step << 20));
		printf("step %lu allocated %lu MiB\n", i + 1, (i + 1) * step);
		fflush(stdout);
	}
	memset(host, 0, sizeof(host));
	if (n) {
		void *args[] = {&ptrs[0], &val};
		CHECK(cu.MemcpyHtoD(ptrs[0], host, sizeof(host)));
		for (unsigned long k = 0; k < launches; k++)
			CHECK(cu.LaunchKernel(fn, 1, 1, 1, THREADS, 1, 1, 0, NULL, args, NULL));
		CHECK(cu.CtxSynchronize());
		CHECK(cu.MemcpyDtoH(host, ptrs[0], sizeof(host)));
		if (verify && launches) {
			for (int t = 0; t < THREADS; t++) {
				if (host[t] != val) {
					fprintf(stderr,
						"helper_cudaapp: kernel output wrong at %d\n", t);
					return 4;
				}
			}
			printf("verified %d words\n", THREADS);
		}
	}
	if (hold) {
		char line[16];
		printf("holding\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			line[0] = 0;
	}
	for (unsigned long i = 0; i < n; i++)
		CHECK(cu.MemFree(ptrs[i]));
	CHECK(cu.CtxDestroy(ctx));
	printf("done steps=%lu launches=%lu copy_bytes=%d\n", n, n ? launches : 0, COPY_BYTES);
	return 0;
}
