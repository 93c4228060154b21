/* The MCP resources of `airlock mcp`: the files that recent runs returned,
 * held so that a client can read one back by its URI (resources/read) or
 * list them (resources/list) after the tool result has gone to the model.
 *
 * Each run gets an id of 128 random bits, and every URI names it: a URI
 * cannot be guessed, and one run's files never answer for another's. Under
 * `airlock serve` with peers the id also names the instance, whose peers
 * forward a read of its URIs to it (http/serve_forward.c). The
 * store is bounded in runs, bytes and age (the caps below, in one place);
 * past them the oldest runs go. A URI of a run this process does not hold
 * (dropped, or made by another airlock process of a multi-instance
 * deployment) is a clear error, never another file.
 *
 * Each owner (the client of airlock mcp, a tenant of airlock serve) has a
 * share of its own: its runs past MCP_STORE_RUNS, MCP_STORE_BYTES or
 * MCP_STORE_AGE_S go, oldest first, and another owner's runs never count
 * there. All owners together are bounded too (MCP_STORE_ALL_*): past that,
 * the oldest run of the owner holding the most goes, so that an owner that
 * holds no more than its fair part of the total is never evicted by
 * another's runs. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base.h"
#include "mcp.h"

#define MCP_STORE_RUNS      32           /* runs whose files are held, per owner */
#define MCP_STORE_BYTES     (128u << 20) /* bytes of the files held, per owner */
#define MCP_STORE_AGE_S     (30 * 60)    /* how long a run's files are held */
#define MCP_STORE_ALL_RUNS  1024         /* runs held for all owners together */
#define MCP_STORE_ALL_BYTES (512u << 20) /* bytes held for all owners together */
#define MCP_STORE_LIST_PAGE 500          /* resources/list entries per page */

typedef struct stored_run {
        char id[MCP_RUN_ID_MAX + 1];
        /* Whose call made the run (mcp_sink.owner, "" on stdio): only the
         * same owner lists or reads its files. */
        char owner[MCP_OWNER_MAX + 1];
        /* Copies of the run's files in one block: the result's own files
         * sit in a capture arena that keeps a megabyte or more resident
         * however small they are. */
        airlock_file *files;
        size_t n_files;
        uint64_t bytes; /* the block's size */
        double added_s; /* CLOCK_MONOTONIC */
        struct stored_run *next;
} stored_run;

struct mcp_store {
        pthread_mutex_t lock;
        stored_run *runs; /* newest first */
        unsigned n_runs;
        uint64_t bytes;
        char instance[MCP_INSTANCE_MAX + 1]; /* named in new run ids, or "" */
};

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int mcp_store_new(mcp_store **ret)
{
        mcp_store *st = calloc(1, sizeof(*st));
        if (!st)
                return -ENOMEM;
        pthread_mutex_init(&st->lock, NULL);
        *ret = st;
        return 0;
}

static void run_free(stored_run *r)
{
        free(r->files);
        free(r);
}

/* The files of res copied into one malloc'd block: the airlock_file array,
 * then each file's path, media type and data. NULL when out of memory. */
static airlock_file *copy_files(const airlock_file *src, size_t n_files, uint64_t *ret_bytes)
{
        size_t total = n_files * sizeof(airlock_file);
        for (size_t i = 0; i < n_files; i++) {
                const airlock_file *f = &src[i];
                size_t n = strlen(f->path) + strlen(f->media_type) + 2;
                if (f->size > SIZE_MAX / 2 || total > SIZE_MAX / 2 - n - (size_t)f->size)
                        return NULL;
                total += n + (size_t)f->size;
        }
        airlock_file *files = malloc(total ? total : 1);
        if (!files)
                return NULL;
        char *p = (char *)(files + n_files);
        for (size_t i = 0; i < n_files; i++) {
                const airlock_file *f = &src[i];
                files[i].size = f->size;
                files[i].path = p;
                p = stpcpy(p, f->path) + 1;
                files[i].media_type = p;
                p = stpcpy(p, f->media_type) + 1;
                files[i].data = (unsigned char *)p;
                if (f->size)
                        memcpy(p, f->data, (size_t)f->size);
                p += f->size;
        }
        *ret_bytes = total;
        return files;
}

void mcp_store_free(mcp_store *st)
{
        if (!st)
                return;
        for (stored_run *r = st->runs, *next; r; r = next) {
                next = r->next;
                run_free(r);
        }
        pthread_mutex_destroy(&st->lock);
        free(st);
}

void mcp_store_forget(mcp_store *st, const char *owner)
{
        stored_run *doomed = NULL;
        pthread_mutex_lock(&st->lock);
        for (stored_run **p = &st->runs; *p;) {
                stored_run *r = *p;
                if (strcmp(r->owner, owner ? owner : "") != 0) {
                        p = &r->next;
                        continue;
                }
                *p = r->next;
                st->n_runs--;
                st->bytes -= r->bytes;
                r->next = doomed;
                doomed = r;
        }
        pthread_mutex_unlock(&st->lock);
        while (doomed) {
                stored_run *r = doomed;
                doomed = r->next;
                run_free(r);
        }
}

void mcp_store_name_runs(mcp_store *st, const char *instance)
{
        snprintf(st->instance, sizeof(st->instance), "%s", instance ? instance : "");
}

int mcp_run_id(const mcp_store *st, char out[MCP_RUN_ID_MAX + 1])
{
        static const char hex[] = "0123456789abcdef";
        unsigned char raw[MCP_RUN_ID_LEN / 2];
        size_t got = 0;
        while (got < sizeof(raw)) {
                ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                got += (size_t)n;
        }
        size_t at = 0;
        if (st->instance[0])
                at = (size_t)snprintf(out, MCP_RUN_ID_MAX + 1, "%s_", st->instance);
        for (size_t i = 0; i < sizeof(raw); i++) {
                out[at + 2 * i] = hex[raw[i] >> 4];
                out[at + 2 * i + 1] = hex[raw[i] & 15];
        }
        out[at + MCP_RUN_ID_LEN] = '\0';
        return 0;
}

/* The length of the run id that starts s (a URI's tail after the prefix):
 * [INSTANCE_]HEX, INSTANCE a valid instance name and HEX MCP_RUN_ID_LEN
 * lowercase hex digits; 0 when s starts with no run id. The instance's
 * length goes to *inst_len (0 when it names none). */
static size_t run_id_span(const char *s, size_t *inst_len)
{
        size_t n = strcspn(s, "/");
        const char *us = memchr(s, '_', n);
        size_t inst = us ? (size_t)(us - s) : 0;
        const char *hex = us ? us + 1 : s;
        *inst_len = inst;
        if (us && !mcp_instance_valid(s, inst))
                return 0;
        if (strspn(hex, "0123456789abcdef") != MCP_RUN_ID_LEN ||
            (size_t)(hex - s) + MCP_RUN_ID_LEN != n)
                return 0;
        return n;
}

bool mcp_resource_uri_instance(const char *uri, char out[MCP_INSTANCE_MAX + 1])
{
        const size_t plen = strlen(MCP_URI_PREFIX);
        size_t inst = 0;
        if (strncmp(uri, MCP_URI_PREFIX, plen) != 0 || !run_id_span(uri + plen, &inst) || !inst)
                return false;
        memcpy(out, uri + plen, inst);
        out[inst] = '\0';
        return true;
}

/* Unlinks *p (a run of the list) and frees it. Caller holds st->lock. */
static void drop_locked(mcp_store *st, stored_run **p)
{
        stored_run *r = *p;
        *p = r->next;
        st->n_runs--;
        st->bytes -= r->bytes;
        run_free(r);
}

/* The link to the oldest run of owner (the list is newest first). */
static stored_run **oldest_of_locked(mcp_store *st, const char *owner)
{
        stored_run **found = NULL;
        for (stored_run **p = &st->runs; *p; p = &(*p)->next)
                if (strcmp((*p)->owner, owner) == 0)
                        found = p;
        return found;
}

/* The owner holding the most bytes (by_bytes) or the most runs; NULL for
 * an empty store. Over the whole store's caps only, so its cost (runs
 * times owners, at most MCP_STORE_ALL_RUNS squared compares) is paid
 * rarely. */
static const char *largest_owner_locked(mcp_store *st, bool by_bytes)
{
        const char *best = NULL;
        uint64_t best_v = 0;
        for (stored_run *r = st->runs; r; r = r->next) {
                bool seen = false;
                for (stored_run *o = st->runs; o != r && !seen; o = o->next)
                        seen = strcmp(o->owner, r->owner) == 0;
                if (seen)
                        continue;
                uint64_t v = 0;
                for (stored_run *o = r; o; o = o->next)
                        if (strcmp(o->owner, r->owner) == 0)
                                v += by_bytes ? o->bytes : 1;
                if (!best || v > best_v) {
                        best = r->owner;
                        best_v = v;
                }
        }
        return best;
}

/* Drops the runs past the caps: every run past the age; owner's own runs
 * past its share (MCP_STORE_RUNS, MCP_STORE_BYTES), oldest first; then,
 * while the store passes its total caps, the oldest run of the owner
 * holding the most. Caller holds st->lock. */
static void evict_locked(mcp_store *st, const char *owner)
{
        double oldest_kept = now_s() - MCP_STORE_AGE_S;
        unsigned mine = 0;
        uint64_t bytes = 0;
        for (stored_run **p = &st->runs; *p;) {
                stored_run *r = *p;
                if (r->added_s < oldest_kept) {
                        drop_locked(st, p);
                        continue;
                }
                if (strcmp(r->owner, owner) == 0) {
                        if (mine >= MCP_STORE_RUNS || bytes + r->bytes > MCP_STORE_BYTES) {
                                drop_locked(st, p);
                                continue;
                        }
                        mine++;
                        bytes += r->bytes;
                }
                p = &r->next;
        }
        while (st->runs && (st->bytes > MCP_STORE_ALL_BYTES || st->n_runs > MCP_STORE_ALL_RUNS)) {
                const char *big = largest_owner_locked(st, st->bytes > MCP_STORE_ALL_BYTES);
                stored_run **p = big ? oldest_of_locked(st, big) : NULL;
                if (!p)
                        break;
                drop_locked(st, p);
        }
}

void mcp_store_keep(mcp_store *st, const char *run_id, const char *owner, airlock_result *res)
{
        if (!res)
                return;
        /* The run's /output files and the new contents of the /input files
         * it created or modified (--input-writable): every file whose URI
         * the result named. */
        size_t n = 0;
        airlock_file *all = calloc(res->n_files + res->n_input_changes + 1, sizeof(*all));
        for (size_t i = 0; all && i < res->n_files; i++)
                all[n++] = res->files[i];
        for (size_t i = 0; all && i < res->n_input_changes; i++) {
                const airlock_input_change *ch = &res->input_changes[i];
                if (ch->media_type)
                        all[n++] = (airlock_file){.path = ch->path,
                                                  .media_type = ch->media_type,
                                                  .size = ch->size,
                                                  .data = ch->data};
        }
        uint64_t bytes = 0;
        for (size_t i = 0; i < n; i++)
                bytes += all[i].size;
        stored_run *r = n && bytes <= MCP_STORE_BYTES ? calloc(1, sizeof(*r)) : NULL;
        if (r && !(r->files = copy_files(all, n, &r->bytes))) {
                free(r);
                r = NULL;
        }
        if (r)
                r->n_files = n;
        free(all);
        airlock_result_free(res);
        if (!r)
                return;
        snprintf(r->id, sizeof(r->id), "%s", run_id);
        snprintf(r->owner, sizeof(r->owner), "%s", owner ? owner : "");
        r->added_s = now_s();
        pthread_mutex_lock(&st->lock);
        r->next = st->runs;
        st->runs = r;
        st->n_runs++;
        st->bytes += r->bytes;
        evict_locked(st, r->owner);
        pthread_mutex_unlock(&st->lock);
}

/* The last path component, for a resource's name. */
static const char *base_name(const char *path)
{
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

json_t *mcp_store_list(mcp_store *st, const char *owner, const char *cursor, int *ret_code,
                       airlock_error *err)
{
        size_t skip = 0;
        if (cursor) {
                char *end;
                errno = 0;
                unsigned long long v = strtoull(cursor, &end, 10);
                if (errno || end == cursor || *end) {
                        *ret_code = RPC_INVALID_PARAMS;
                        (void)al_error(err, -EINVAL, NULL,
                                       "resources/list: not a cursor of this server");
                        return NULL;
                }
                skip = (size_t)v;
        }
        json_t *list = json_array();
        if (!list) {
                *ret_code = RPC_INTERNAL_ERROR;
                (void)al_error(err, -EINVAL, NULL, "out of memory");
                return NULL;
        }
        size_t index = 0;
        bool more = false;
        pthread_mutex_lock(&st->lock);
        evict_locked(st, owner ? owner : "");
        for (stored_run *r = st->runs; r && !more; r = r->next) {
                if (strcmp(r->owner, owner ? owner : "") != 0)
                        continue;
                for (size_t i = 0; i < r->n_files; i++, index++) {
                        if (index < skip)
                                continue;
                        if (json_array_size(list) == MCP_STORE_LIST_PAGE) {
                                more = true;
                                break;
                        }
                        const airlock_file *f = &r->files[i];
                        const char *text_type = mcp_text_type(f);
                        char *uri = mcp_resource_uri(r->id, f->path);
                        if (uri)
                                json_array_append_new(
                                    list,
                                    json_pack("{s:s, s:s, s:s, s:s, s:I}", "uri", uri, "name",
                                              base_name(f->path), "title", f->path, "mimeType",
                                              text_type ? text_type : f->media_type, "size",
                                              (json_int_t)f->size));
                        free(uri);
                }
        }
        pthread_mutex_unlock(&st->lock);
        json_t *out = json_pack("{s:o}", "resources", list);
        if (out && more) {
                char next[32];
                snprintf(next, sizeof(next), "%zu", index);
                json_object_set_new(out, "nextCursor", json_string(next));
        }
        return out;
}

static int hex_value(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* The path of a URI's tail, percent-decoded into out (as long as s, plus
 * a NUL). False for a bad escape or an encoded NUL. */
static bool percent_decode(const char *s, char *out)
{
        while (*s) {
                if (*s != '%') {
                        *out++ = *s++;
                        continue;
                }
                int hi = hex_value(s[1]), lo = hi >= 0 ? hex_value(s[2]) : -1;
                if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                        return false;
                *out++ = (char)(hi << 4 | lo);
                s += 3;
        }
        *out = '\0';
        return true;
}

json_t *mcp_store_read(mcp_store *st, const char *owner, const char *uri, int *ret_code,
                       airlock_error *err)
{
        const size_t plen = strlen(MCP_URI_PREFIX);
        *ret_code = RPC_RESOURCE_NOT_FOUND;
        if (strncmp(uri, MCP_URI_PREFIX, plen) != 0) {
                (void)al_error(
                    err, -EINVAL, NULL,
                    "resource not found: %.300s: this server serves only the files of its "
                    "recent runs, as " MCP_URI_PREFIX "... URIs",
                    uri);
                return NULL;
        }
        const char *id = uri + plen;
        size_t inst_len;
        size_t id_len = run_id_span(id, &inst_len);
        const char *tail = id + id_len;
        if (!id_len || (strncmp(tail, "/output/", 8) != 0 && strncmp(tail, "/input/", 7) != 0)) {
                (void)al_error(
                    err, -EINVAL, NULL,
                    "resource not found: %.300s: not a URI this server makes (" MCP_URI_PREFIX
                    "RUN-ID/output/PATH or RUN-ID/input/PATH)",
                    uri);
                return NULL;
        }
        char *path = malloc(strlen(tail) + 1);
        if (!path) {
                *ret_code = RPC_INTERNAL_ERROR;
                (void)al_error(err, -EINVAL, NULL, "out of memory");
                return NULL;
        }
        if (!percent_decode(tail, path)) {
                free(path);
                (void)al_error(err, -EINVAL, NULL,
                               "resource not found: %.300s: a bad percent-encoding", uri);
                return NULL;
        }
        json_t *out = NULL;
        pthread_mutex_lock(&st->lock);
        evict_locked(st, owner ? owner : "");
        stored_run *r = st->runs;
        /* Another owner's run answers as one this server does not hold. */
        while (r && (strlen(r->id) != id_len || memcmp(r->id, id, id_len) != 0 ||
                     strcmp(r->owner, owner ? owner : "") != 0))
                r = r->next;
        const airlock_file *f = NULL;
        for (size_t i = 0; r && i < r->n_files && !f; i++)
                if (strcmp(r->files[i].path, path) == 0)
                        f = &r->files[i];
        if (f) {
                json_t *c = mcp_resource_contents(f, uri);
                out = c ? json_pack("{s:[o]}", "contents", c) : NULL;
                if (!out) {
                        *ret_code = RPC_INTERNAL_ERROR;
                        (void)al_error(err, -EINVAL, NULL, "out of memory");
                }
        } else if (r) {
                (void)al_error(err, -EINVAL, NULL,
                               "resource not found: %.300s: that run returned no such file", uri);
        } else {
                (void)al_error(
                    err, -EINVAL, NULL,
                    "resource not found: %.300s: this server holds no run %.*s. It keeps "
                    "the files of your last %d runs (at most %u MiB) for %d minutes; the "
                    "URI may also come from another airlock mcp process",
                    uri, (int)id_len, id, MCP_STORE_RUNS, MCP_STORE_BYTES >> 20,
                    MCP_STORE_AGE_S / 60);
        }
        pthread_mutex_unlock(&st->lock);
        free(path);
        return out;
}
