/* The tenant's generation record (see tenant_gen.h).
 *
 * The state file DIR/.airlock/NAME holds, at offset 0, the generation: a
 * 64-bit counter in the host's byte order, as before the record existed (a
 * build without the record bumps it alone, which the record's own copy of
 * the generation then contradicts, so readers walk in full). After it, the
 * record: a header (magic, the generation again, the base generation, the
 * payload's length and count of changes, a check) and the changes
 * base+1 .. generation, oldest first, each its generation, whether it names
 * everything, its folders (a length and the bytes of each) and its files
 * (a length and the bytes of the path, whether it was removed, its size
 * and the 32 hex digits of its content hash as written). The record
 * is small (at most TENANT_GEN_BYTES_MAX bytes of changes) and read whole
 * with one pread: on shared storage each read is a round trip to the file
 * system's server, and it is read only when the file's times moved. */
#include "tenant_gen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "airlock.h"
#include "base.h"

/* ALGEN1 (folders only) is read as naming everything. */
#define GEN_MAGIC "ALGEN2\0\0"

typedef struct gen_header {
        char magic[8];
        uint64_t gen;  /* the same as the counter at offset 0 */
        uint64_t base; /* the changes base+1 .. gen follow */
        uint32_t len;  /* bytes of changes */
        uint32_t n;    /* changes */
        uint64_t check;
} gen_header;

#define GEN_HEAD (sizeof(uint64_t) + sizeof(gen_header))
#define GEN_FILE (GEN_HEAD + TENANT_GEN_BYTES_MAX)

/* One change's fixed part, then dirs x (uint16_t length, bytes), then
 * files x (uint16_t length, bytes, GEN_FILE_TAIL bytes: uint8_t removed,
 * uint64_t size, 32 hex digits). */
typedef struct gen_change_head {
        uint64_t gen;
        uint8_t all;
        uint8_t pad;
        uint16_t dirs;
        uint16_t files;
        uint16_t pad2;
} gen_change_head;

#define GEN_FILE_TAIL (1 + sizeof(uint64_t) + 32)

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
        const unsigned char *c = p;
        for (size_t i = 0; i < n; i++)
                h = (h ^ c[i]) * 0x100000001b3ull;
        return h;
}

static uint64_t check_of(const gen_header *h, const unsigned char *payload)
{
        uint64_t c = fnv(0xcbf29ce484222325ull, GEN_MAGIC, 8);
        c = fnv(c, &h->gen, sizeof(h->gen));
        c = fnv(c, &h->base, sizeof(h->base));
        c = fnv(c, &h->len, sizeof(h->len));
        c = fnv(c, &h->n, sizeof(h->n));
        return fnv(c, payload, h->len);
}

static void files_free(tenant_gen_change *c)
{
        for (size_t i = 0; i < c->n_files; i++) {
                free(c->files[i]);
                free(c->hashes[i]);
        }
        free(c->files);
        free(c->sizes);
        free(c->hashes);
        c->files = c->hashes = NULL;
        c->sizes = NULL;
        c->n_files = 0;
}

void tenant_gen_change_free(tenant_gen_change *c)
{
        for (size_t i = 0; i < c->n; i++)
                free(c->dirs[i]);
        free(c->dirs);
        files_free(c);
        *c = (tenant_gen_change){0};
}

static void change_all(tenant_gen_change *c)
{
        tenant_gen_change_free(c);
        c->all = true;
}

/* Adds the folder dir (len bytes) to c once; past the cap, all. */
static void change_add(tenant_gen_change *c, const char *dir, size_t len)
{
        if (c->all)
                return;
        for (size_t i = 0; i < c->n; i++)
                if (strlen(c->dirs[i]) == len && memcmp(c->dirs[i], dir, len) == 0)
                        return;
        if (c->n == TENANT_GEN_DIRS_MAX) {
                change_all(c);
                return;
        }
        char **nv = realloc(c->dirs, (c->n + 1) * sizeof(*nv));
        if (!nv) {
                change_all(c);
                return;
        }
        c->dirs = nv;
        if (!(c->dirs[c->n] = strndup(dir, len))) {
                change_all(c);
                return;
        }
        c->n++;
}

void tenant_gen_change_add_parent(tenant_gen_change *c, const char *path)
{
        const char *slash = strrchr(path, '/');
        change_add(c, path, slash ? (size_t)(slash - path) : 0);
}

/* Names the folders of c's files instead of the files, from now on. */
static void files_to_folders(tenant_gen_change *c)
{
        for (size_t i = 0; i < c->n_files; i++)
                tenant_gen_change_add_parent(c, c->files[i]);
        files_free(c);
        c->by_folder = true;
}

/* Adds the file path (len bytes) to c, removed (hex NULL) or with size
 * bytes hashing to hex; once, its last word kept. */
static void file_add(tenant_gen_change *c, const char *path, size_t len, const char *hex,
                     uint64_t size)
{
        if (c->all)
                return;
        _cleanup_free_ char *p = strndup(path, len);
        if (!p) {
                change_all(c);
                return;
        }
        if (c->by_folder) {
                tenant_gen_change_add_parent(c, p);
                return;
        }
        size_t k = 0;
        while (k < c->n_files && strcmp(c->files[k], p) != 0)
                k++;
        if (k == c->n_files && k == TENANT_GEN_FILES_MAX) {
                files_to_folders(c);
                tenant_gen_change_add_parent(c, p);
                return;
        }
        char *h = hex ? strndup(hex, 32) : NULL;
        if (hex && !h) {
                change_all(c);
                return;
        }
        if (k == c->n_files) {
                char **nf = realloc(c->files, (k + 1) * sizeof(*nf));
                if (nf)
                        c->files = nf;
                char **nh = nf ? realloc(c->hashes, (k + 1) * sizeof(*nh)) : NULL;
                if (nh)
                        c->hashes = nh;
                uint64_t *ns = nh ? realloc(c->sizes, (k + 1) * sizeof(*ns)) : NULL;
                if (!ns) {
                        free(h);
                        change_all(c);
                        return;
                }
                c->sizes = ns;
                c->files[k] = TAKE_PTR(p);
                c->n_files++;
        } else {
                free(c->hashes[k]);
        }
        c->hashes[k] = h;
        c->sizes[k] = size;
}

void tenant_gen_change_add_file(tenant_gen_change *c, const char *path, const void *data,
                                size_t len)
{
        char hex[33];
        airlock_content_hash(len ? data : "", len, hex);
        file_add(c, path, strlen(path), hex, len);
}

void tenant_gen_change_add_removed(tenant_gen_change *c, const char *path)
{
        file_add(c, path, strlen(path), NULL, 0);
}

/* The record in buf (got bytes of the file): its header and changes when
 * it is whole and agrees with the counter, else NULL. */
static const unsigned char *record_parse(const unsigned char *buf, size_t got, gen_header *h)
{
        uint64_t counter;
        if (got < GEN_HEAD)
                return NULL;
        memcpy(&counter, buf, sizeof(counter));
        memcpy(h, buf + sizeof(counter), sizeof(*h));
        const unsigned char *payload = buf + GEN_HEAD;
        if (memcmp(h->magic, GEN_MAGIC, 8) != 0 || h->gen != counter || h->base > h->gen ||
            h->len > TENANT_GEN_BYTES_MAX || h->len > got - GEN_HEAD ||
            h->n > TENANT_GEN_CHANGES_MAX || h->n != h->gen - h->base ||
            check_of(h, payload) != h->check)
                return NULL;
        return payload;
}

/* The change at *off of a parsed record's payload (len bytes): its head,
 * and *off moved past it. false when it does not fit (a record that
 * passed its check is never so, unless written by hand with a good
 * check: then it is not used). */
static bool change_next(const unsigned char *p, size_t len, size_t *off, gen_change_head *ch,
                        size_t *ret_dirs_off)
{
        if (len - *off < sizeof(*ch))
                return false;
        memcpy(ch, p + *off, sizeof(*ch));
        size_t o = *off + sizeof(*ch);
        *ret_dirs_off = o;
        for (unsigned k = 0; k < (unsigned)ch->dirs + ch->files; k++) {
                uint16_t l;
                if (len - o < sizeof(l))
                        return false;
                memcpy(&l, p + o, sizeof(l));
                o += sizeof(l);
                size_t tail = k < ch->dirs ? 0 : GEN_FILE_TAIL;
                if (len - o < (size_t)l + tail)
                        return false;
                o += l + tail;
        }
        *off = o;
        return true;
}

/* Adds the folders and files of the change at d (its head ch, checked by
 * change_next) to ret. */
static void change_read(const unsigned char *p, size_t d, const gen_change_head *ch,
                        tenant_gen_change *ret)
{
        for (unsigned k = 0; k < (unsigned)ch->dirs + ch->files && !ret->all; k++) {
                uint16_t l;
                memcpy(&l, p + d, sizeof(l));
                d += sizeof(l);
                const char *s = (const char *)p + d;
                d += l;
                if (k < ch->dirs) {
                        change_add(ret, s, l);
                        continue;
                }
                uint8_t removed = p[d];
                uint64_t size;
                memcpy(&size, p + d + 1, sizeof(size));
                file_add(ret, s, l, removed ? NULL : (const char *)p + d + 1 + sizeof(size), size);
                d += GEN_FILE_TAIL;
        }
}

/* Drops from c the files of the folders it names: those are read whole. */
static void files_in_folders_drop(tenant_gen_change *c)
{
        size_t k = 0;
        for (size_t i = 0; i < c->n_files; i++) {
                const char *slash = strrchr(c->files[i], '/');
                size_t len = slash ? (size_t)(slash - c->files[i]) : 0;
                bool in = false;
                for (size_t j = 0; j < c->n && !in; j++)
                        in = strlen(c->dirs[j]) == len && memcmp(c->dirs[j], c->files[i], len) == 0;
                if (in) {
                        free(c->files[i]);
                        free(c->hashes[i]);
                        continue;
                }
                c->files[k] = c->files[i];
                c->hashes[k] = c->hashes[i];
                c->sizes[k++] = c->sizes[i];
        }
        c->n_files = k;
}

void tenant_gen_change_merge(tenant_gen_change *dst, const tenant_gen_change *src)
{
        if (src->all) {
                change_all(dst);
                return;
        }
        for (size_t i = 0; i < src->n && !dst->all; i++)
                change_add(dst, src->dirs[i], strlen(src->dirs[i]));
        for (size_t i = 0; i < src->n_files && !dst->all; i++)
                file_add(dst, src->files[i], strlen(src->files[i]), src->hashes[i], src->sizes[i]);
        if (!dst->all)
                files_in_folders_drop(dst);
}

int tenant_gen_since(int fd, uint64_t since, bool seen, tenant_gen_change *ret, uint64_t *ret_gen,
                     bool *ret_read)
{
        *ret = (tenant_gen_change){0};
        *ret_gen = 0;
        _cleanup_free_ unsigned char *buf = malloc(GEN_FILE);
        ssize_t got = buf ? pread(fd, buf, GEN_FILE, 0) : -1;
        *ret_read = got == 0 || got >= (ssize_t)sizeof(uint64_t);
        if (got >= (ssize_t)sizeof(uint64_t))
                memcpy(ret_gen, buf, sizeof(*ret_gen));
        else if (got == 0)
                *ret_gen = 0; /* made by a lock, never bumped */
        if (got >= 0 && seen && *ret_gen == since)
                return 0;
        gen_header h;
        const unsigned char *p = got > 0 ? record_parse(buf, (size_t)got, &h) : NULL;
        if (!p || !seen || since < h.base || since > h.gen) {
                ret->all = true;
                return 1;
        }
        /* The changes after since, each one described: base+1, base+2, ... */
        size_t off = 0;
        for (uint64_t want = h.base + 1; want <= h.gen && !ret->all; want++) {
                gen_change_head ch;
                size_t d;
                if (!change_next(p, h.len, &off, &ch, &d) || ch.gen != want) {
                        change_all(ret);
                        break;
                }
                if (ch.gen <= since)
                        continue;
                if (ch.all) {
                        change_all(ret);
                        break;
                }
                change_read(p, d, &ch, ret);
        }
        if (!ret->all)
                files_in_folders_drop(ret);
        if (!ret->all && !ret->n && !ret->n_files)
                ret->all = true; /* a change that names nothing: never written so */
        return 1;
}

/* Appends change c (generation gen) to the payload p (*len bytes used of
 * TENANT_GEN_BYTES_MAX). A change that alone would take more than half of
 * the record is written as naming everything. */
static void change_write(unsigned char *p, uint32_t *len, uint64_t gen, const tenant_gen_change *c)
{
        size_t need = sizeof(gen_change_head);
        for (size_t i = 0; !c->all && i < c->n; i++)
                need += sizeof(uint16_t) + strlen(c->dirs[i]);
        for (size_t i = 0; !c->all && i < c->n_files; i++)
                need += sizeof(uint16_t) + strlen(c->files[i]) + GEN_FILE_TAIL;
        bool all = c->all || need > TENANT_GEN_BYTES_MAX / 2;
        gen_change_head ch = {.gen = gen,
                              .all = all,
                              .dirs = all ? 0 : (uint16_t)c->n,
                              .files = all ? 0 : (uint16_t)c->n_files};
        memcpy(p + *len, &ch, sizeof(ch));
        *len += sizeof(ch);
        for (size_t i = 0; !all && i < c->n; i++) {
                uint16_t l = (uint16_t)strlen(c->dirs[i]);
                memcpy(p + *len, &l, sizeof(l));
                memcpy(p + *len + sizeof(l), c->dirs[i], l);
                *len += sizeof(l) + l;
        }
        for (size_t i = 0; !all && i < c->n_files; i++) {
                uint16_t l = (uint16_t)strlen(c->files[i]);
                unsigned char *o = p + *len;
                memcpy(o, &l, sizeof(l));
                memcpy(o + sizeof(l), c->files[i], l);
                o += sizeof(l) + l;
                o[0] = c->hashes[i] == NULL;
                memcpy(o + 1, &c->sizes[i], sizeof(c->sizes[i]));
                memset(o + 1 + sizeof(uint64_t), '0', 32);
                if (c->hashes[i])
                        memcpy(o + 1 + sizeof(uint64_t), c->hashes[i], 32);
                *len += (uint32_t)(sizeof(l) + l + GEN_FILE_TAIL);
        }
}

/* Whether the changes of a parsed record (its header h, payload p) walk
 * whole: h->n of them, base+1 .. gen in order, filling h->len exactly. A
 * record's check says only that its writer meant it: anyone who writes the
 * volume can write one that passes and whose changes do not walk. */
static bool record_walks(const unsigned char *p, const gen_header *h)
{
        size_t off = 0, d;
        gen_change_head ch;
        for (uint32_t k = 0; k < h->n; k++)
                if (!change_next(p, h->len, &off, &ch, &d) || ch.gen != h->base + 1 + k)
                        return false;
        return off == h->len;
}

/* Contract: writes the next generation whatever the file held before
 * (another host's, a torn write, anyone's bytes on the volume): a bump
 * that did not write would leave every other host's next call blind to
 * this change (the generation is what tells them), silently, for every
 * later change too. Only a failed read or write of the file returns 0. A
 * record whose changes cannot be carried over (unparsable, or parsed but
 * not walkable) is started again from the counter: a reader that saw less
 * reads the whole tree. */
uint64_t tenant_gen_bump(int fd, const tenant_gen_change *c, uint64_t *ret_prev)
{
        *ret_prev = 0;
        _cleanup_free_ unsigned char *buf = malloc(GEN_FILE);
        _cleanup_free_ unsigned char *out = malloc(GEN_FILE + TENANT_GEN_BYTES_MAX);
        if (!buf || !out)
                return 0;
        ssize_t got = pread(fd, buf, GEN_FILE, 0);
        uint64_t prev = 0;
        if (got >= (ssize_t)sizeof(prev))
                memcpy(&prev, buf, sizeof(prev));
        gen_header h;
        const unsigned char *old = got > 0 ? record_parse(buf, (size_t)got, &h) : NULL;
        if (old && !record_walks(old, &h))
                old = NULL;
        /* The changes kept, then this one; an unreadable record starts
         * again from the counter (readers that saw less walk in full). */
        unsigned char *p = out + GEN_HEAD;
        gen_header nh = {.gen = prev + 1, .base = prev};
        memcpy(nh.magic, GEN_MAGIC, 8);
        if (old) {
                memcpy(p, old, h.len);
                nh.len = h.len;
                nh.n = h.n;
                nh.base = h.base;
        }
        change_write(p, &nh.len, nh.gen, c);
        nh.n++;
        /* The oldest changes go while the record is over a cap. */
        while (nh.n > TENANT_GEN_CHANGES_MAX || nh.len > TENANT_GEN_BYTES_MAX) {
                size_t off = 0, d;
                gen_change_head ch;
                if (!change_next(p, nh.len, &off, &ch, &d))
                        return 0;
                memmove(p, p + off, nh.len - off);
                nh.len -= (uint32_t)off;
                nh.n--;
                nh.base = ch.gen;
        }
        nh.check = check_of(&nh, p);
        memcpy(out, &nh.gen, sizeof(nh.gen));
        memcpy(out + sizeof(nh.gen), &nh, sizeof(nh));
        size_t total = GEN_HEAD + nh.len;
        if (pwrite(fd, out, total, 0) != (ssize_t)total)
                return 0;
        *ret_prev = prev;
        return nh.gen;
}
