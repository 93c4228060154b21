/* airlock serve's peers: the other instances of one cluster, each holding
 * its own sessions. A call naming another instance's session is forwarded
 * to that instance (serve_forward.c); this file holds who the peers are
 * (--peers FILE, --peer-dns DOMAIN), the cluster secret (the one secret
 * whose target is "peer"), the signing of a forwarded request and the
 * checks of one that comes in on --peer-listen.
 *
 * A peer request is signed with HMAC-SHA256 under the cluster secret over
 * its method, path, the instance that sends it, the instance it is for (so
 * that one captured on its way, or sent to a host that a --peer-dns name
 * led to, is refused by every other instance), the tenant it acts for,
 * the Accept it asks for, a timestamp, a nonce and the SHA-256 of its
 * body. The receiving instance refuses one without a signature, with a
 * wrong one, with a timestamp more than PEER_SKEW_S seconds away from its
 * own clock, or whose nonce it has seen (the nonces of the window are
 * kept, at most PEER_NONCES); each refusal is one line on stderr.
 *
 * A forwarded call's trace context (its client span's) rides in traceparent,
 * tracestate and baggage headers with a signature of their own over the
 * request's signature and those values (http_peer_sign_trace): the owner
 * takes it as its server span's parent only when that signature holds. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base.h"
#include "serve_internal.h"
#include "sha256.h"
#include "trace.h"

#define PEER_LINE_MAX 256
#define PEER_PROBES   16 /* slots of the nonce table one nonce may take */

/* ---- the peers file ----------------------------------------------------- */

/* Adds "INSTANCE ADDR:PORT" (line lineno of path) to t. */
static int peer_line(http_peer_table *t, char *p, const char *path, unsigned lineno,
                     airlock_error *err)
{
        char *name = strtok(p, " \t"), *addr = strtok(NULL, " \t"), *more = strtok(NULL, " \t");
        if (!name || !addr || more)
                return al_error(err, -EINVAL, NULL, "--peers %s:%u: not INSTANCE ADDR:PORT", path,
                                lineno);
        if (!mcp_instance_valid(name, strlen(name)))
                return al_error(err, -EINVAL, NULL,
                                "--peers %s:%u: '%.40s' is not an instance name ([a-z0-9-]{1,%d})",
                                path, lineno, name, MCP_INSTANCE_MAX);
        struct sockaddr_storage ss;
        socklen_t sl;
        bool loop;
        airlock_error why = {0};
        if (http_parse_listen(addr, &ss, &sl, &loop, &why) < 0)
                return al_error(err, -EINVAL, NULL,
                                "--peers %s:%u: '%.80s' is not ADDR:PORT or [V6ADDR]:PORT with a "
                                "numeric address",
                                path, lineno, addr);
        if (t->n >= PEERS_MAX)
                return al_error(err, -E2BIG, NULL, "--peers %s: more than %d peers", path,
                                PEERS_MAX);
        for (size_t i = 0; i < t->n; i++)
                if (strcmp(t->v[i].name, name) == 0)
                        return al_error(err, -EINVAL, NULL,
                                        "--peers %s:%u: instance %s is named twice", path, lineno,
                                        name);
        snprintf(t->v[t->n].name, sizeof(t->v[t->n].name), "%s", name);
        snprintf(t->v[t->n].addr, sizeof(t->v[t->n].addr), "%s", addr);
        t->n++;
        return 0;
}

/* Reads the peers file into *ret (blank and '#' lines skipped). Returns 0
 * or -errno with err naming the file and line. */
static int peers_load(const char *path, http_peer_table *ret, airlock_error *err)
{
        FILE *f = fopen(path, "re");
        if (!f) {
                int e = errno;
                return al_error(err, -e, path, "--peers %s: %s", path, strerror(e));
        }
        http_peer_table t = {.v = calloc(PEERS_MAX, sizeof(*t.v))};
        char line[PEER_LINE_MAX + 2];
        unsigned lineno = 0;
        int r = t.v ? 0 : al_error(err, -ENOMEM, NULL, "out of memory");
        while (r == 0 && fgets(line, sizeof(line), f)) {
                lineno++;
                size_t len = strlen(line);
                if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
                        r = al_error(err, -E2BIG, NULL, "--peers %s:%u: longer than %d bytes", path,
                                     lineno, PEER_LINE_MAX);
                        break;
                }
                char *hash = strchr(line, '#');
                if (hash)
                        *hash = '\0';
                char *p = line + strspn(line, " \t\r\n");
                len = strlen(p);
                while (len && strchr(" \t\r\n", p[len - 1]))
                        p[--len] = '\0';
                if (*p)
                        r = peer_line(&t, p, path, lineno, err);
        }
        fclose(f);
        if (r < 0) {
                free(t.v);
                return r;
        }
        *ret = t;
        return 0;
}

/* ---- the cluster secret ------------------------------------------------- */

/* Takes the cluster secret of cfg into s (under tokens_lock's write side). */
static int load_key(http_server *s, const airlock_config *cfg, airlock_error *err)
{
        unsigned char key[PEER_KEY_MAX];
        size_t len = 0;
        int r = airlock_config_peer_secret(cfg, key, sizeof(key), &len, err);
        if (r < 0)
                return r;
        /* As the tokens: a short value could be guessed, and an example's
         * placeholder (deploy/k8s/secret.yaml) is public. */
        bool placeholder = len >= 13 && memcmp(key, "REPLACE-WITH-", 13) == 0;
        explicit_bzero(key, placeholder || len < PEER_KEY_MIN ? sizeof(key) : 0);
        if (placeholder)
                return al_error(err, -EINVAL, NULL,
                                "the cluster secret is an example's placeholder (REPLACE-WITH-…): "
                                "make your own (openssl rand -hex 32)");
        if (len < PEER_KEY_MIN)
                return al_error(err, -EINVAL, NULL,
                                "the cluster secret is %zu bytes: it takes at least %d "
                                "(openssl rand -hex 32)",
                                len, PEER_KEY_MIN);
        pthread_rwlock_wrlock(&s->tokens_lock);
        explicit_bzero(s->peer_key, sizeof(s->peer_key));
        memcpy(s->peer_key, key, len);
        s->peer_key_len = len;
        pthread_rwlock_unlock(&s->tokens_lock);
        explicit_bzero(key, sizeof(key));
        return 0;
}

bool http_peers_on(const http_server *s)
{
        return s->opt.peer_listen || s->opt.peers_file || s->opt.peer_dns;
}

int http_peers_setup(http_server *s, const airlock_config *cfg, airlock_error *err)
{
        pthread_mutex_init(&s->nonce_lock, NULL);
        if (!http_peers_on(s))
                return 0;
        int r = load_key(s, cfg, err);
        if (r == -ENOENT)
                return al_error(err, r, NULL,
                                "--peer-listen, --peers and --peer-dns need the cluster secret: "
                                "--secret NAME=file:PATH@peer, the same on every instance (none "
                                "is declared)");
        if (r < 0)
                return r;
        if (s->opt.peer_dns && !s->opt.peer_listen)
                return al_error(err, -EINVAL, NULL,
                                "--peer-dns needs --peer-listen: a peer found by DNS is reached "
                                "at this instance's own peer port");
        if (s->opt.peers_file && (r = peers_load(s->opt.peers_file, &s->peers, err)) < 0)
                return r;
        if ((s->opt.peer_listen &&
             (!(s->nonces = calloc(PEER_NONCES, sizeof(*s->nonces))) ||
              !(s->peer_rates = calloc(PEER_TENANT_SLOTS, sizeof(*s->peer_rates))))) ||
            (s->opt.peers_file &&
             !(s->cancel_rates = calloc(PEER_TENANT_SLOTS, sizeof(*s->cancel_rates)))))
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOMEM, NULL, "out of memory");
        return 0;
}

void http_peers_reload(http_server *s, const airlock_config *cfg, char *said, size_t n_said)
{
        said[0] = '\0';
        if (!http_peers_on(s))
                return;
        airlock_error err = {0};
        if (cfg && load_key(s, cfg, &err) < 0) {
                snprintf(said, n_said, "keeping the old cluster secret: %s", err.message);
                return;
        }
        if (!s->opt.peers_file)
                return;
        http_peer_table t;
        if (peers_load(s->opt.peers_file, &t, &err) < 0) {
                snprintf(said, n_said, "keeping the old peers: %s", err.message);
                return;
        }
        pthread_rwlock_wrlock(&s->tokens_lock);
        http_peer_table old = s->peers;
        s->peers = t;
        pthread_rwlock_unlock(&s->tokens_lock);
        free(old.v);
        snprintf(said, n_said, "%zu peers loaded from %s", t.n, s->opt.peers_file);
}

void http_peers_free(http_server *s)
{
        free(s->peers.v);
        free(s->nonces);
        free(s->peer_rates);
        free(s->cancel_rates);
        explicit_bzero(s->peer_key, sizeof(s->peer_key));
        pthread_mutex_destroy(&s->nonce_lock);
}

size_t http_peer_list(http_server *s, http_peer **ret)
{
        pthread_rwlock_rdlock(&s->tokens_lock);
        size_t n = s->peers.n;
        *ret = n ? malloc(n * sizeof(**ret)) : NULL;
        if (*ret)
                memcpy(*ret, s->peers.v, n * sizeof(**ret));
        pthread_rwlock_unlock(&s->tokens_lock);
        return *ret ? n : 0;
}

bool http_peer_url(http_server *s, const char *instance, char *url, size_t size)
{
        bool found = false;
        pthread_rwlock_rdlock(&s->tokens_lock);
        for (size_t i = 0; i < s->peers.n && !found; i++)
                if (strcmp(s->peers.v[i].name, instance) == 0) {
                        snprintf(url, size, "http://%s" PEER_PATH, s->peers.v[i].addr);
                        found = true;
                }
        pthread_rwlock_unlock(&s->tokens_lock);
        if (!found && s->opt.peer_dns && s->peer_port) {
                snprintf(url, size, "http://%s.%s:%u" PEER_PATH, instance, s->opt.peer_dns,
                         s->peer_port);
                found = true;
        }
        return found;
}

/* ---- signatures --------------------------------------------------------- */

static void hex(const uint8_t *b, size_t n, char *out)
{
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[b[i] >> 4];
                out[2 * i + 1] = digits[b[i] & 15];
        }
        out[2 * n] = '\0';
}

/* HMAC-SHA256 of msg under the cluster secret, in hex (64 digits): the
 * one place the key is read, under the tokens' lock that a reload takes.
 * Returns false when no secret is loaded. */
static bool cluster_mac(http_server *s, const char *msg, size_t n, char out[65])
{
        uint8_t mac[32];
        pthread_rwlock_rdlock(&s->tokens_lock);
        bool have = s->peer_key_len > 0;
        if (have)
                mcp_hmac_sha256(s->peer_key, s->peer_key_len, msg, n, mac);
        pthread_rwlock_unlock(&s->tokens_lock);
        if (have)
                hex(mac, 32, out);
        explicit_bzero(mac, sizeof(mac));
        return have;
}

/* The signature of a peer request (hex, 64 digits): HMAC-SHA256 under the
 * cluster secret of every part that says what the request does and for
 * whom. Returns false when no secret is loaded. */
static bool peer_mac(http_server *s, const char *from, const char *to, const char *tenant,
                     const char *accept, const char *ts, const char *nonce, const char *body_hex,
                     char out[65])
{
        char msg[600];
        int n = snprintf(msg, sizeof(msg), "airlock-peer-2\nPOST\n%s\n%s\n%s\n%s\n%s\n%s\n%s\n%s",
                         PEER_PATH, from, to, tenant, accept, ts, nonce, body_hex);
        if (n < 0 || (size_t)n >= sizeof(msg))
                return false;
        return cluster_mac(s, msg, (size_t)n, out);
}

/* The SHA-256 of a body, hex. */
static void body_sha(const char *body, size_t len, char out[65])
{
        uint8_t h[32];
        mcp_sha256(body ? body : "", len, h);
        hex(h, 32, out);
}

int http_peer_sign(http_server *s, const char *to, const char *tenant, const char *accept,
                   const char *body, size_t len, http_peer_headers *h)
{
        uint8_t nonce[16];
        if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce))
                return -EIO;
        hex(nonce, sizeof(nonce), h->nonce);
        snprintf(h->ts, sizeof(h->ts), "%lld", (long long)time(NULL));
        snprintf(h->tenant, sizeof(h->tenant), "%s", tenant && *tenant ? tenant : "-");
        body_sha(body, len, h->body);
        return peer_mac(s, s->opt.instance, to, h->tenant, accept, h->ts, h->nonce, h->body, h->sig)
                   ? 0
                   : -ENOKEY;
}

/* Whether nonce (32 hex digits) is new within the window: it is recorded
 * then, until its timestamp ts leaves the window. Past PEER_NONCES fresh
 * ones, a request is refused (*full) rather than a nonce forgotten early. */
static bool nonce_fresh(http_server *s, const char *nonce, long long ts, long long now, bool *full)
{
        uint8_t h[32];
        mcp_sha256(nonce, 32, h);
        uint64_t at = 0;
        memcpy(&at, h, sizeof(at));
        int free_slot = -1;
        bool seen = false;
        *full = false;
        pthread_mutex_lock(&s->nonce_lock);
        for (unsigned i = 0; i < PEER_PROBES && !seen; i++) {
                http_nonce *e = &s->nonces[(at + i) % PEER_NONCES];
                bool live = e->until >= now;
                if (live && memcmp(e->nonce, nonce, 32) == 0)
                        seen = true;
                else if (!live && free_slot < 0)
                        free_slot = (int)((at + i) % PEER_NONCES);
        }
        if (!seen && free_slot >= 0) {
                memcpy(s->nonces[free_slot].nonce, nonce, 32);
                s->nonces[free_slot].until = ts + PEER_SKEW_S;
        }
        pthread_mutex_unlock(&s->nonce_lock);
        *full = !seen && free_slot < 0;
        return !seen && free_slot >= 0;
}

/* Counts one more request of tenant in table (PEER_TENANT_SLOTS slots, a
 * window of PEER_SKEW_S seconds each) unless it made max in this window:
 * returns whether it had room. A tenant that finds no slot in its probes
 * (more tenants than PEER_TENANT_SLOTS at once) is not counted. */
static bool rate_take(http_server *s, http_peer_rate *table, const char *tenant, long long now,
                      unsigned max)
{
        uint8_t h[32];
        mcp_sha256(tenant, strlen(tenant), h);
        uint64_t id = 0;
        memcpy(&id, h, sizeof(id));
        id |= 1; /* 0 marks a free slot */
        long long window = now / PEER_SKEW_S;
        bool room = true;
        pthread_mutex_lock(&s->nonce_lock);
        http_peer_rate *e = NULL, *stale = NULL;
        for (unsigned i = 0; i < PEER_PROBES && !e; i++) {
                http_peer_rate *r = &table[(id + i) % PEER_TENANT_SLOTS];
                if (r->tenant == id)
                        e = r;
                else if (!stale && (r->tenant == 0 || r->window < window - 1))
                        stale = r;
        }
        if (!e && stale)
                *(e = stale) = (http_peer_rate){.tenant = id, .window = window};
        if (e && e->window != window)
                *e = (http_peer_rate){.tenant = id, .window = window};
        if (e && e->count >= max)
                room = false;
        else if (e)
                e->count++;
        pthread_mutex_unlock(&s->nonce_lock);
        return room;
}

/* Contract: whether tenant may make one more peer request in this window
 * of PEER_SKEW_S seconds (counted then): at most PEER_TENANT_MAX. Every
 * forwarded call takes a nonce, and a tenant forwards as fast as it can
 * send calls naming any handle of another instance: without its own cap,
 * one tenant would fill the nonce cache and have every other tenant's
 * forwarded calls refused. A cluster without tokens, one tenant, has the
 * whole cache. A tenant that finds no slot (more tenants than
 * PEER_TENANT_SLOTS at once, in its probes) is not counted; the cache's
 * own cap still holds. */
static bool tenant_room(http_server *s, const char *tenant, long long now)
{
        /* Without --tokens ("-") the cluster has one tenant, whose share
         * is the whole cache: no other tenant's calls are there to keep. */
        if (strcmp(tenant, "-") == 0)
                return true;
        return rate_take(s, s->peer_rates, tenant, now, PEER_TENANT_MAX);
}

/* Contract: at most PEER_CANCEL_MAX cancel rounds of one tenant leave this
 * instance in a window of PEER_SKEW_S seconds. One notification the client
 * sends is a peer request to every peer of the peers file, each counted in
 * the tenant's PEER_TENANT_MAX there: uncapped, a client's cancels would be
 * multiplied by the number of peers, and would use up its tenant's share on
 * every peer (its forwarded calls refused everywhere). A cluster without
 * tokens has one tenant and is capped alike (the cap bounds the requests
 * this instance sends). */
bool http_cancel_room(http_server *s, const char *tenant)
{
        if (!s->cancel_rates)
                return true;
        return rate_take(s, s->cancel_rates, tenant, (long long)time(NULL), PEER_CANCEL_MAX);
}

static bool is_hex(const char *v, size_t n)
{
        if (!v || strlen(v) != n)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f')))
                        return false;
        return true;
}

static bool say(char *why, size_t n, const char *fmt, ...) _printf_(3, 4);
static bool say(char *why, size_t n, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
        return false;
}

static bool same_time(const char *a, const char *b, size_t n)
{
        unsigned char d = 0;
        for (size_t i = 0; i < n; i++)
                d |= (unsigned char)(a[i] ^ b[i]);
        return d == 0;
}

/* The signature of a peer request's trace context (hex, 64 digits):
 * HMAC-SHA256 under the cluster secret of the request's own signature
 * (which covers its body, tenant, time and nonce) and the traceparent,
 * tracestate and baggage headers. A header of its own rather than a part
 * of the request's signature, so that an instance that knows no trace
 * headers still takes the request and ignores them. */
static bool trace_mac(http_server *s, const char *sig, const char *tp, const char *state,
                      const char *bag, char out[65])
{
        char msg[160 + AL_TRACEPARENT_LEN + AL_TRACESTATE_MAX + AL_BAGGAGE_MAX];
        int n = snprintf(msg, sizeof(msg), "airlock-peer-trace-1\n%s\n%s\n%s\n%s", sig, tp,
                         state ? state : "", bag ? bag : "");
        if (n < 0 || (size_t)n >= sizeof(msg))
                return false;
        return cluster_mac(s, msg, (size_t)n, out);
}

bool http_peer_sign_trace(http_server *s, const http_peer_headers *ph, const al_trace_ctx *ctx,
                          char tp[AL_TRACEPARENT_LEN + 1], char sig[65])
{
        if (!ctx->valid)
                return false;
        al_trace_format(ctx, tp);
        return trace_mac(s, ph->sig, tp, ctx->tracestate, ctx->baggage, sig);
}

/* Contract: true only when the request came on --peer-listen (its own
 * signature checked, http_peer_admit) and its traceparent, tracestate and
 * baggage headers carry Airlock-Peer-Trace-Signature made with this
 * server's cluster secret over that signature and these very values: then
 * ret is their context. A trace header from anyone else, or one a proxy
 * changed, is never a span's parent. */
bool http_peer_trace(const http_request *rq, struct MHD_Connection *c, al_trace_ctx *ret)
{
#define H(name) MHD_lookup_connection_value(c, MHD_HEADER_KIND, name)
        const char *tp = H("traceparent"), *state = H("tracestate"), *bag = H("baggage");
        const char *sig = H("Airlock-Peer-Signature"), *tsig = H("Airlock-Peer-Trace-Signature");
#undef H
        char want[65];
        if (!rq->peer || !tp || !is_hex(sig, 64) || !is_hex(tsig, 64) ||
            !trace_mac(rq->srv, sig, tp, state, bag, want) || !same_time(want, tsig, 64))
                return false;
        return al_trace_parse(tp, state, bag, ret) == 0;
}

/* Whether sig is right for the request as signed for instance to, its
 * body's SHA-256 the one its headers name (checked against the body once
 * it came, http_peer_body_ok). */
static bool signed_for(http_request *rq, const char *to, const char *from, const char *tenant,
                       const char *accept, const char *ts, const char *nonce, const char *sig)
{
        char want[65];
        return peer_mac(rq->srv, from, to, tenant, accept, ts, nonce, rq->peer_body, want) &&
               same_time(want, sig, 64);
}

/* Contract: true only for a request signed with this server's cluster
 * secret for this very instance (never one signed for another, captured on
 * its way there and sent here), over the SHA-256 of its body that its
 * headers name (the body itself is checked when it came,
 * http_peer_body_ok: this runs on the headers alone, so that no one
 * without the secret has a byte of a body read and held, out of the
 * --max-body-total that the clients' listener shares), tenant and Accept,
 * within PEER_SKEW_S seconds
 * of this server's clock, whose nonce was not seen in that window, of a
 * tenant within its PEER_TENANT_MAX (else *busy too); the tenant (which
 * the forwarding instance authenticated by its token) is then rq->owner,
 * and must be one of this server's tenants. Otherwise why says which check
 * failed (never the secret or a signature). */
static bool peer_check(http_request *rq, struct MHD_Connection *c, char *why, size_t n, bool *busy)
{
        http_server *s = rq->srv;
#define H(name) MHD_lookup_connection_value(c, MHD_HEADER_KIND, name)
        const char *sig = H("Airlock-Peer-Signature"), *ts = H("Airlock-Peer-Time");
        const char *nonce = H("Airlock-Peer-Nonce"), *tenant = H("Airlock-Peer-Tenant");
        const char *from = H("Airlock-Peer-From"), *accept = H("Accept");
        const char *to = H("Airlock-Peer-To"), *body = H("Airlock-Peer-Body-SHA256");
#undef H
        if (!sig || !ts || !nonce || !tenant || !from || !body)
                return say(why, n,
                           "unsigned (no Airlock-Peer-Signature, -Time, -Nonce, "
                           "-Tenant, -From and -Body-SHA256)");
        char *end = NULL;
        long long t = strtoll(ts, &end, 10), now = (long long)time(NULL);
        if (!is_hex(body, 64))
                return say(why, n, "malformed signature headers");
        snprintf(rq->peer_body, sizeof(rq->peer_body), "%s", body);
        if (!is_hex(sig, 64) || !is_hex(nonce, 32) || !*ts || *end ||
            !mcp_instance_valid(from, strlen(from)) || strlen(tenant) > TENANT_NAME_MAX)
                return say(why, n, "malformed signature headers");
        accept = accept ? accept : "";
        if (!signed_for(rq, s->opt.instance, from, tenant, accept, ts, nonce, sig)) {
                /* Airlock-Peer-To only says which: the signature is
                 * checked for this instance, whatever the header says. */
                if (to && strcmp(to, s->opt.instance) != 0 && mcp_instance_valid(to, strlen(to)) &&
                    signed_for(rq, to, from, tenant, accept, ts, nonce, sig))
                        return say(why, n,
                                   "signed by %s for instance %.40s, not this one (%s): sent "
                                   "here by someone else",
                                   from, to, s->opt.instance);
                return say(why, n, "bad signature (from %s; is the cluster secret the same?)",
                           from);
        }
        if (t < now - PEER_SKEW_S || t > now + PEER_SKEW_S)
                return say(why, n, "expired: its time is %lld s from this server's (at most %d)",
                           t - now, PEER_SKEW_S);
        if (!tenant_room(s, tenant, now)) {
                *busy = true;
                return say(why, n,
                           "tenant '%.64s' made %d peer requests within %d s, its share of the "
                           "replay cache (PEER_TENANT_MAX)",
                           tenant, PEER_TENANT_MAX, PEER_SKEW_S);
        }
        bool full;
        if (!nonce_fresh(s, nonce, t, now, &full))
                return say(why, n,
                           full ? "too many peer requests in %d s (the replay cache holds %d)"
                                : "replayed (its nonce was seen within %d s)",
                           PEER_SKEW_S, PEER_NONCES);
        snprintf(rq->owner, sizeof(rq->owner), "%s", strcmp(tenant, "-") == 0 ? "" : tenant);
        if (!s->opt.tokens_file ? rq->owner[0] != '\0' : !http_tenant_exists(s, rq->owner))
                return say(why, n, "tenant '%.64s' is not one of this server's", tenant);
        return true;
}

bool http_peer_admit(struct MHD_Connection *c, http_request *rq, enum MHD_Result *ret)
{
        char why[200];
        bool busy = false;
        if (peer_check(rq, c, why, sizeof(why), &busy))
                return true;
        rq->owner[0] = '\0';
        fprintf(stderr, "airlock serve: peer request from %s refused: %s\n", rq->client, why);
        http_refuse(rq, RF_PEER_AUTH);
        snprintf(rq->method, sizeof(rq->method), "?");
        http_release_body(rq);
        /* A tenant over its share is told to wait, not that the secrets
         * differ: the forwarding instance says so to its client. */
        *ret = busy ? http_queue_rpc_error(c, rq, MHD_HTTP_TOO_MANY_REQUESTS, RPC_INTERNAL_ERROR,
                                           "too many peer requests of this tenant; retry later",
                                           "Retry-After", "30")
                    : http_queue_rpc_error(c, rq, MHD_HTTP_UNAUTHORIZED, RPC_INVALID_REQUEST,
                                           "peer request refused (this server's log says why)",
                                           NULL, NULL);
        return false;
}

bool http_peer_body_ok(struct MHD_Connection *c, http_request *rq, enum MHD_Result *ret)
{
        char got[65];
        body_sha(rq->body.data, rq->body.len, got);
        if (same_time(got, rq->peer_body, 64))
                return true;
        rq->owner[0] = '\0';
        fprintf(stderr,
                "airlock serve: peer request from %s refused: its body is not the one its signed "
                "headers name (Airlock-Peer-Body-SHA256)\n",
                rq->client);
        http_refuse(rq, RF_PEER_AUTH);
        snprintf(rq->method, sizeof(rq->method), "?");
        http_release_body(rq);
        *ret =
            http_queue_rpc_error(c, rq, MHD_HTTP_UNAUTHORIZED, RPC_INVALID_REQUEST,
                                 "peer request refused (this server's log says why)", NULL, NULL);
        return false;
}

/* ---- the listener ------------------------------------------------------- */

enum MHD_Result http_peer_route(struct MHD_Connection *c, http_request *rq, const char *url,
                                const char *method)
{
        if (strcmp(url, PEER_PATH) != 0)
                return http_queue_text(c, rq, MHD_HTTP_NOT_FOUND, "not found\n");
        if (strcmp(method, "POST") != 0)
                return http_queue_text(c, rq, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
        /* Signed headers before a byte of the body: the budget of bodies
         * held (--max-body-total) is the clients' listener's too, which
         * reads none before a token. */
        enum MHD_Result refused;
        if (!http_peer_admit(c, rq, &refused))
                return refused;
        /* A draining instance takes nothing new, from a client or a peer:
         * the peer tells its client that the session's host is going. */
        return http_post_admit(c, rq, NULL);
}
