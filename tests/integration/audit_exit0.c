/* SPDX-License-Identifier: MIT */
/*
 * The smallest program that can be executed: static, no libc, exits 0. The exec storm of
 * tests/integration/audit_events.sh and tests/bench/audit_exec.sh spawns it, so that the exec
 * path itself (and the audit program on it) is what is measured, not the dynamic loader.
 * Built by tests/integration/audit.mk with -static -nostdlib.
 */
void _start(void);

void _start(void)
{
#if defined(__x86_64__)
	__asm__ volatile("mov $60, %eax\n\txor %edi, %edi\n\tsyscall");
#elif defined(__aarch64__)
	__asm__ volatile("mov x8, #93\n\tmov x0, #0\n\tsvc #0");
#else
#error "audit_exit0.c: add the exit system call for this architecture"
#endif
	for (;;)
		;
}
