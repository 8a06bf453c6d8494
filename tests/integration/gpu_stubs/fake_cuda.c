// SPDX-License-Identifier: MIT
/*
 * Stand-in libcuda.so.1: the CUDA driver API entry points Corral's uprobes attach to, with the
 * real symbol names and signatures (64-bit CUdeviceptr), backed by malloc. Kernels do nothing.
 * Used by tests/integration/gpu_limits.sh through tests/integration/helper_cudaapp.c.
 * Every entry point is noinline and externally visible so the uprobe offsets are the symbols'.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

#define CUDA_SUCCESS		   0
#define CUDA_ERROR_INVALID_VALUE   1
#define CUDA_ERROR_OUT_OF_MEMORY   2
#define CUDA_ERROR_NOT_INITIALIZED 3

#define API __attribute__((visibility("default"), noinline, used))

static int inited;
static char ctx_token, mod_token, func_token;

API CUresult cuInit(unsigned int flags);
API CUresult cuDriverGetVersion(int *v);
API CUresult cuDeviceGetCount(int *n);
API CUresult cuDeviceGet(CUdevice *d, int ordinal);
API CUresult cuCtxCreate_v2(CUcontext *c, unsigned int flags, CUdevice d);
API CUresult cuCtxDestroy_v2(CUcontext c);
API CUresult cuCtxSynchronize(void);
API CUresult cuModuleLoadData(CUmodule *m, const void *image);
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name);
API CUresult cuModuleUnload(CUmodule m);
API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
				unsigned int elem);
API CUresult cuMemFree_v2(CUdeviceptr dptr);
API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			    unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
			    void **extra);
API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n);
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n);
API CUresult cuGetErrorString(CUresult e, const char **s);
API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s);
API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s);
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s);
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s);

CUresult cuInit(unsigned int flags)
{
	inited = 1;
	return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 12000;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return inited ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	*d = ordinal;
	return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxCreate_v2(CUcontext *c, unsigned int flags, CUdevice d)
{
	*c = (CUcontext)(void *)&ctx_token;
	return inited ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuCtxDestroy_v2(CUcontext c)
{
	return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
	return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	*m = (CUmodule)(void *)&mod_token;
	return image ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	*f = (CUfunction)(void *)&func_token;
	return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m)
{
	return CUDA_SUCCESS;
}

static CUresult fake_alloc(CUdeviceptr *dptr, size_t bytesize)
{
	void *p;
	if (!inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	p = malloc(bytesize); /* not touched: pages stay unbacked */
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*dptr = (CUdeviceptr)(unsigned long)p;
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return fake_alloc(dptr, bytesize);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	return fake_alloc(dptr, bytesize);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
			    unsigned int elem)
{
	size_t p = (width + 511) & ~(size_t)511;
	if (!pitch || height == 0 || p < width)
		return CUDA_ERROR_INVALID_VALUE;
	*pitch = p;
	return fake_alloc(dptr, p * height);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	free((void *)(unsigned long)dptr);
	return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
			void **extra)
{
	return f ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	memcpy((void *)(unsigned long)dst, src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	memcpy(dst, (const void *)(unsigned long)src, n);
	return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult e, const char **s)
{
	*s = e == CUDA_SUCCESS ? "no error" : "fake error";
	return CUDA_SUCCESS;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
	return fake_alloc(dptr, bytesize);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	return cuMemFree_v2(dptr);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return cuMemcpyHtoD_v2(dst, src, n);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return cuMemcpyDtoH_v2(dst, src, n);
}
