/* SPDX-License-Identifier: MIT */
#include "collector/tls.h"
#include "common/fileio.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include "common/error.h"
#include "common/macro.h"

#define TLS_CHAIN_MAX 16
#define TLS_NAME_MAX  256

/*
 * One reading of the files. A generation is never freed before coll_tls_free: a handshake
 * that started with it may still point at its certificates (GnuTLS keeps the retrieve
 * function's pointers, it does not copy them). A reload costs a few KiB that way.
 */
struct tls_gen {
	gnutls_pcert_st pcert[TLS_CHAIN_MAX];
	unsigned npcert;
	gnutls_privkey_t key;
	gnutls_x509_trust_list_t ca; /* NULL: no client certificates */
	char fingerprint[COLL_TLS_FINGERPRINT_MAX];
	struct tls_gen *older;
};

struct coll_tls {
	char *cert_path, *key_path, *ca_path;
	char *ca_pem; /* as first read: MHD_OPTION_HTTPS_MEM_TRUST */
	_Atomic(struct tls_gen *) cur;
};

static _Atomic(struct coll_tls *) active;

static void gen_free(struct tls_gen *g)
{
	if (!g)
		return;
	for (unsigned i = 0; i < g->npcert; i++)
		gnutls_pcert_deinit(&g->pcert[i]);
	if (g->key)
		gnutls_privkey_deinit(g->key);
	if (g->ca)
		gnutls_x509_trust_list_deinit(g->ca, 1);
	free(g);
}

/* A certificate, key or CA file larger than this is refused (a CA bundle is a few hundred KiB). */
#define TLS_FILE_MAX (16u << 20)

/*
 * path's contents in d (gnutls_malloc'd, NUL-terminated), read from the fd whose type was
 * checked: a FIFO or a device in the file's place would block the start (and the serve loop
 * on a reload), and opening the path again after the check would leave a window for one.
 */
static int load(const char *path, const char *what, gnutls_datum_t *d, char *err, size_t errlen)
{
	_cleanup_close_ int fd = open_regular(path);
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r;

	if (fd < 0)
		return err_set(err, errlen, fd, "%s %s: %s", what, path, regular_file_strerror(fd));
	/* the private key as ssh takes one: owned by this user or root, nobody else's to read */
	if (strcmp(what, "tls_key") == 0) {
		r = secret_fd_check(fd, what, path, err, errlen);
		if (r < 0)
			return r;
	}
	r = read_fd(fd, TLS_FILE_MAX, &buf, &len);
	if (r < 0)
		return err_set(err, errlen, r, "%s %s: cannot read (%s)", what, path,
			       r == -EFBIG ? "larger than 16 MiB" : strerror(-r));
	d->data = gnutls_malloc(len + 1);
	if (d->data) {
		memcpy(d->data, buf, len);
		d->data[len] = 0;
		d->size = (unsigned)len;
	}
	explicit_bzero(buf, len); /* a key's bytes leave only the copy gnutls frees */
	return d->data ? 0 : err_set(err, errlen, -ENOMEM, "%s %s: out of memory", what, path);
}

/* The files' current contents as a generation; ca_pem (if not NULL) gets the CA file. */
static int gen_load(const struct coll_tls *t, struct tls_gen **ret, char **ca_pem, char *err,
		    size_t errlen)
{
	gnutls_datum_t cert = {0}, key = {0}, ca = {0};
	gnutls_certificate_credentials_t chk = NULL;
	struct tls_gen *g = calloc(1, sizeof(*g));
	unsigned char fp[32];
	size_t fplen = sizeof(fp);
	int r;

	if (!g)
		return -ENOMEM;
	r = load(t->cert_path, "tls_cert", &cert, err, errlen);
	if (r == 0)
		r = load(t->key_path, "tls_key", &key, err, errlen);
	if (r == 0 && t->ca_path)
		r = load(t->ca_path, "tls_client_ca", &ca, err, errlen);
	if (r < 0)
		goto out;
	g->npcert = TLS_CHAIN_MAX;
	r = gnutls_pcert_list_import_x509_raw(g->pcert, &g->npcert, &cert, GNUTLS_X509_FMT_PEM,
					      GNUTLS_X509_CRT_LIST_FAIL_IF_UNSORTED);
	if (r < 0 || g->npcert == 0) {
		g->npcert = 0;
		r = err_set(err, errlen, -EINVAL,
			    "tls_cert %s: expected PEM certificates, the server's first (%s)",
			    t->cert_path, r < 0 ? gnutls_strerror(r) : "none found");
		goto out;
	}
	if (gnutls_privkey_init(&g->key) < 0) {
		r = -ENOMEM;
		goto out;
	}
	r = gnutls_privkey_import_x509_raw(g->key, &key, GNUTLS_X509_FMT_PEM, NULL, 0);
	if (r < 0) {
		r = err_set(err, errlen, -EINVAL, "tls_key %s: expected a PEM private key (%s)",
			    t->key_path, gnutls_strerror(r));
		goto out;
	}
	/* the key must be the certificate's: GnuTLS checks that when both go into credentials */
	r = gnutls_certificate_allocate_credentials(&chk);
	if (r == 0)
		r = gnutls_certificate_set_x509_key_mem2(chk, &cert, &key, GNUTLS_X509_FMT_PEM,
							 NULL, 0);
	gnutls_certificate_free_credentials(chk);
	if (r < 0) {
		r = err_set(err, errlen, -EINVAL, "tls_key %s does not go with tls_cert %s (%s)",
			    t->key_path, t->cert_path, gnutls_strerror(r));
		goto out;
	}
	if (gnutls_fingerprint(GNUTLS_DIG_SHA256, &g->pcert[0].cert, fp, &fplen) == 0) {
		int n = snprintf(g->fingerprint, sizeof(g->fingerprint), "sha256:");

		for (size_t i = 0; i < fplen && n + 3 < (int)sizeof(g->fingerprint); i++)
			n += snprintf(g->fingerprint + n, sizeof(g->fingerprint) - (size_t)n,
				      "%02x", fp[i]);
	}
	if (t->ca_path) {
		if (gnutls_x509_trust_list_init(&g->ca, 0) < 0) {
			g->ca = NULL;
			r = -ENOMEM;
			goto out;
		}
		r = gnutls_x509_trust_list_add_trust_mem(g->ca, &ca, NULL, GNUTLS_X509_FMT_PEM, 0,
							 0);
		if (r <= 0) {
			r = err_set(err, errlen, -EINVAL,
				    "tls_client_ca %s: expected PEM CA certificates (%s)",
				    t->ca_path, r < 0 ? gnutls_strerror(r) : "none found");
			goto out;
		}
		if (ca_pem) {
			*ca_pem = strndup((const char *)ca.data, ca.size);
			if (!*ca_pem) {
				r = -ENOMEM;
				goto out;
			}
		}
	}
	r = 0;
	*ret = g;
	g = NULL;
out:
	gnutls_free(cert.data);
	if (key.data) {
		explicit_bzero(key.data, key.size);
		gnutls_free(key.data);
	}
	gnutls_free(ca.data);
	gen_free(g);
	return r;
}

int coll_tls_new(const char *cert, const char *key, const char *client_ca, struct coll_tls **ret,
		 char *err, size_t errlen)
{
	struct coll_tls *t;
	struct tls_gen *g = NULL;
	int r;

	if (!cert || !*cert || !key || !*key)
		return err_set(err, errlen, -EINVAL, "%s: TLS needs both tls_cert and tls_key%s",
			       !cert || !*cert ? "tls_cert missing" : "tls_key missing",
			       client_ca && *client_ca ? " (tls_client_ca is only used with them)"
						       : "");
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->cert_path = strdup(cert);
	t->key_path = strdup(key);
	t->ca_path = client_ca && *client_ca ? strdup(client_ca) : NULL;
	if (!t->cert_path || !t->key_path || (client_ca && *client_ca && !t->ca_path)) {
		r = -ENOMEM;
		goto out_free;
	}
	r = gen_load(t, &g, &t->ca_pem, err, errlen);
	if (r < 0)
		goto out_free;
	atomic_store(&t->cur, g);
	*ret = t;
	return 0;
out_free:
	coll_tls_free(t);
	return r;
}

int coll_tls_reload(struct coll_tls *t, char *err, size_t errlen)
{
	struct tls_gen *g = NULL;
	int r = gen_load(t, &g, NULL, err, errlen);

	if (r < 0)
		return r;
	g->older = atomic_load(&t->cur);
	atomic_store(&t->cur, g);
	return 0;
}

int coll_tls_activate(struct coll_tls *t)
{
	struct coll_tls *none = NULL;

	if (!t) {
		atomic_store(&active, NULL);
		return 0;
	}
	if (!atomic_compare_exchange_strong(&active, &none, t) && none != t)
		return -EBUSY;
	return 0;
}

void coll_tls_free(struct coll_tls *t)
{
	struct tls_gen *g;

	if (!t)
		return;
	if (atomic_load(&active) == t)
		atomic_store(&active, NULL);
	g = atomic_load(&t->cur);
	while (g) {
		struct tls_gen *o = g->older;

		gen_free(g);
		g = o;
	}
	free(t->cert_path);
	free(t->key_path);
	free(t->ca_path);
	free(t->ca_pem);
	free(t);
}

static int retrieve(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
		    const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
		    gnutls_pcert_st **pcert, unsigned int *pcert_length, gnutls_privkey_t *privkey)
{
	struct coll_tls *t = atomic_load(&active);
	struct tls_gen *g = t ? atomic_load(&t->cur) : NULL;

	if (!g)
		return -1;
	*pcert = g->pcert;
	*pcert_length = g->npcert;
	*privkey = g->key;
	return 0;
}

void *coll_tls_retrieve_function(void)
{
	gnutls_certificate_retrieve_function2 *f = retrieve;

	return (void *)f;
}

void coll_tls_fingerprint(struct coll_tls *t, char *buf, size_t len)
{
	snprintf(buf, len, "%s", atomic_load(&t->cur)->fingerprint);
}

const char *coll_tls_client_ca_pem(const struct coll_tls *t)
{
	return t->ca_pem;
}

bool coll_tls_has_client_ca(const struct coll_tls *t)
{
	return t->ca_path != NULL;
}

/* The certificate names node: a DNS subject alternative name equal to it, or, without any
 * DNS name, a common name equal to it. first gets the first name seen (for the message). */
static bool names_node(gnutls_x509_crt_t crt, const char *node, char *first, size_t firstlen)
{
	char name[TLS_NAME_MAX];
	bool dns = false;

	first[0] = 0;
	for (unsigned i = 0;; i++) {
		size_t len = sizeof(name) - 1;
		int type = gnutls_x509_crt_get_subject_alt_name(crt, i, name, &len, NULL);

		if (type == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
			break;
		if (type != GNUTLS_SAN_DNSNAME)
			continue; /* another kind of name, or one too long */
		name[MIN(len, sizeof(name) - 1)] = 0;
		if (!dns)
			snprintf(first, firstlen, "%s", name);
		dns = true;
		if (strlen(name) == len && strcmp(name, node) == 0)
			return true;
	}
	if (!dns) {
		size_t len = sizeof(name);

		if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, name,
						  &len) == 0) {
			snprintf(first, firstlen, "%s", name);
			return strlen(name) == len && strcmp(name, node) == 0;
		}
	}
	return false;
}

int coll_tls_check_peer(struct coll_tls *t, void *session, const char *node, char *why,
			size_t whylen)
{
	struct tls_gen *g = atomic_load(&t->cur);
	gnutls_x509_crt_t crts[TLS_CHAIN_MAX];
	const gnutls_datum_t *peers;
	unsigned n = 0, np = 0, status = 0;
	char first[TLS_NAME_MAX];
	gnutls_typed_vdata_st purpose = {.type = GNUTLS_DT_KEY_PURPOSE_OID,
					 .data = (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT};
	int r;

	if (!g->ca)
		return 0;
	peers = session ? gnutls_certificate_get_peers(session, &np) : NULL;
	if (!peers || np == 0)
		return err_set(why, whylen, -EACCES,
			       "no client certificate (tls_client_ca is set: node %s must present "
			       "its certificate)",
			       node);
	np = MIN(np, (unsigned)TLS_CHAIN_MAX);
	for (; n < np; n++) {
		if (gnutls_x509_crt_init(&crts[n]) < 0)
			break;
		if (gnutls_x509_crt_import(crts[n], &peers[n], GNUTLS_X509_FMT_DER) < 0) {
			gnutls_x509_crt_deinit(crts[n]);
			break;
		}
	}
	if (n < np) {
		r = err_set(why, whylen, -EACCES, "client certificate unreadable");
		goto out;
	}
	/* a certificate that names its purposes must name client authentication (one issued for
	 * a server only is no node's); one that names none is taken */
	r = gnutls_x509_trust_list_verify_crt2(g->ca, crts, n, &purpose, 1, 0, &status, NULL);
	if (r < 0 || status != 0) {
		gnutls_datum_t txt = {0};

		if (r >= 0)
			(void)gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509,
									   &txt, 0);
		r = err_set(why, whylen, -EACCES,
			    "client certificate does not verify against tls_client_ca: %s",
			    txt.data ? (const char *)txt.data : gnutls_strerror(r));
		gnutls_free(txt.data);
		goto out;
	}
	if (!names_node(crts[0], node, first, sizeof(first))) {
		r = err_set(why, whylen, -EACCES,
			    "client certificate names '%.64s', not node '%.64s' of the token",
			    first[0] ? first : "(nothing)", node);
		goto out;
	}
	r = 0;
out:
	for (unsigned i = 0; i < n; i++)
		gnutls_x509_crt_deinit(crts[i]);
	return r;
}
