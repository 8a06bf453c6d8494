# `make deb`: a Debian package built with dpkg-deb from a DESTDIR install (no debhelper).
# Output: $(O)/corral_<version>_<arch>.deb. Depends lists the runtime libraries the programs
# link against (bookworm names).
DEB_VERSION ?= 0.1.0
DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
DEB_ROOT := $(O)/deb/root
DEB_FILE := $(O)/corral_$(DEB_VERSION)_$(DEB_ARCH).deb
DEB_DEPENDS := libc6, libseccomp2, libjansson4, libyajl2, libinih1, libsystemd0, libcurl4, \
	libmicrohttpd12, libsqlite3-0, libpq5, libnl-3-200, libnl-genl-3-200, libbpf1, \
	libcgroup2, libssl3, libelf1, zlib1g, systemd

.PHONY: deb
deb: $(DEB_FILE)

$(DEB_FILE): $(PROGRAMS) systemd/install.sh systemd/deb.mk $(wildcard systemd/deb/*) \
		$(wildcard systemd/*.service systemd/*.conf systemd/corral.* docs/man/*)
	$(call msg,DEB,$@)
	$(Q)rm -rf $(O)/deb && mkdir -p $(DEB_ROOT)/DEBIAN
	$(Q)systemd/install.sh "$(DEB_ROOT)" /usr "$(O)" >/dev/null
	$(Q)gzip -9n $(DEB_ROOT)/usr/share/man/man*/*
	$(Q)find $(DEB_ROOT)/etc -type f | sed 's|^$(DEB_ROOT)||' >$(DEB_ROOT)/DEBIAN/conffiles
	$(Q)sed -e 's/@VERSION@/$(DEB_VERSION)/' -e 's/@ARCH@/$(DEB_ARCH)/' \
		-e 's/@DEPENDS@/$(DEB_DEPENDS)/' \
		-e "s/@SIZE@/$$(du -sk --exclude=DEBIAN $(DEB_ROOT) | cut -f1)/" \
		systemd/deb/control >$(DEB_ROOT)/DEBIAN/control
	$(Q)install -m 0755 systemd/deb/postinst systemd/deb/prerm systemd/deb/postrm $(DEB_ROOT)/DEBIAN/
	$(Q)dpkg-deb --root-owner-group -Zxz --build $(DEB_ROOT) $@ >/dev/null
