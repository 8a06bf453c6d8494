# Static, libc-free program that exits 0: the exec storm target of the audit tests/benchmark.
$(O)/tests/integration/audit_exit0: tests/integration/audit_exit0.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -static -nostdlib -fno-stack-protector -fno-asynchronous-unwind-tables \
		-o $@ $<
EXTRA_TARGETS += $(O)/tests/integration/audit_exit0
