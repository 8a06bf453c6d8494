/* SPDX-License-Identifier: MIT */
/*
 * TLS of the collector's server (GnuTLS under libmicrohttpd): the served certificate chain and
 * key, read from PEM files and read again on coll_tls_reload() (SIGHUP), and optionally a CA
 * that client certificates are verified against, a verified certificate's identity (its DNS
 * subject alternative names, or its common name where it has none) naming the node whose
 * token comes with it. Library code: nothing is printed.
 *
 * libmicrohttpd asks for the certificate through a GnuTLS retrieve function, which takes no
 * context: the credentials in use are process-wide, so one process serves TLS through one
 * coll_tls at a time (coll_tls_activate: -EBUSY for a second).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define COLL_TLS_FINGERPRINT_MAX 96 /* "sha256:" + 64 hex digits */

struct coll_tls;

/* Read cert (PEM, leaf first, then intermediates), key (PEM) and, if client_ca is not NULL,
 * the client CA bundle. Errors name the file and the problem (key not matching the cert). */
int coll_tls_new(const char *cert, const char *key, const char *client_ca, struct coll_tls **ret,
		 char *err, size_t errlen);
/* Read the files again; on success the new credentials serve the handshakes that start from
 * now on (and the new CA verifies the requests that come from now on). On failure the old ones
 * stay in use. */
int coll_tls_reload(struct coll_tls *t, char *err, size_t errlen);
/* Make t the credentials of the retrieve function; NULL: none. -EBUSY if another is. */
int coll_tls_activate(struct coll_tls *t);
/* Frees every generation loaded. The server using it must have stopped. */
void coll_tls_free(struct coll_tls *t);
/* gnutls_certificate_retrieve_function2 for MHD_OPTION_HTTPS_CERT_CALLBACK (typed void here
 * so that users need not include GnuTLS). */
void *coll_tls_retrieve_function(void);
/* "sha256:HEX" of the leaf certificate served now. */
void coll_tls_fingerprint(struct coll_tls *t, char *buf, size_t len);
/* The client CA PEM as read at coll_tls_new (for MHD_OPTION_HTTPS_MEM_TRUST, which makes the
 * server ask for a client certificate); NULL without a client CA. */
const char *coll_tls_client_ca_pem(const struct coll_tls *t);
bool coll_tls_has_client_ca(const struct coll_tls *t);
/*
 * The peer of session (a gnutls_session_t) presented a certificate chain that verifies against
 * the current client CA and whose identity is exactly node: 0. Else -EACCES with the reason in
 * why ("no client certificate", "client certificate not signed by tls_client_ca: ...",
 * "client certificate names n2, not n1").
 */
int coll_tls_check_peer(struct coll_tls *t, void *session, const char *node, char *why,
			size_t whylen);
