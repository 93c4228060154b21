/* The tenant's generation record: what each change of a tenant's files
 * touched, kept in the tenant's state file (DIR/.airlock/NAME) beside the
 * generation counter that every host's workspace tools bump under the
 * tenant's lock. A host that last saw generation G reads the record and
 * tells its cache which folders changed since G, so that a call after
 * another host's change reads those folders again, not the whole tree.
 *
 * The record is a hint that only ever narrows a walk: whenever it cannot
 * tell exactly (missing, unreadable, torn, over its caps, older than G, a
 * change that made or removed folders, a bump by a build without the
 * record), the answer is "everything", which is today's full walk. So
 * correctness never depends on it. docs/design.md ("Shared storage") is the
 * contract. */
#ifndef AIRLOCK_MCP_TENANT_GEN_H
#define AIRLOCK_MCP_TENANT_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Folders one change may name; a change touching more names the whole
 * tree. */
#define TENANT_GEN_DIRS_MAX 32
/* Files one change may name; a change writing or removing more names
 * their folders instead. */
#define TENANT_GEN_FILES_MAX 32
/* Changes the record keeps (the oldest go first), and the record's bytes:
 * a host that last saw a generation older than the record's first change
 * reads the whole tree. */
#define TENANT_GEN_CHANGES_MAX 64
#define TENANT_GEN_BYTES_MAX   16384

/* Folders below the tenant's folder ("" for the folder itself) whose own
 * entries changed, or all; and files that changed alone in their folders
 * (files[i], with hashes[i] NULL for a removal, else the
 * airlock_content_hash of its sizes[i] bytes as written): parallel
 * arrays, as airlock_cache_workspace_files_changed takes them. */
typedef struct tenant_gen_change {
        char **dirs;
        size_t n;
        bool all;
        char **files;
        uint64_t *sizes;
        char **hashes;
        size_t n_files;
        bool by_folder; /* past TENANT_GEN_FILES_MAX: files go as folders */
} tenant_gen_change;

/* Adds the folder of path (a checked workspace path: its text up to the
 * last '/', "" without one) to c, once; past TENANT_GEN_DIRS_MAX (or out of
 * memory) c names everything. */
void tenant_gen_change_add_parent(tenant_gen_change *c, const char *path);
/* Adds the file path (a checked workspace path), written with the bytes
 * data (len), to c; a file named again replaces its first word. Past
 * TENANT_GEN_FILES_MAX the files become their folders
 * (tenant_gen_change_add_parent); out of memory, c names everything. */
void tenant_gen_change_add_file(tenant_gen_change *c, const char *path, const void *data,
                                size_t len);
/* The same for the file path removed. */
void tenant_gen_change_add_removed(tenant_gen_change *c, const char *path);
void tenant_gen_change_free(tenant_gen_change *c);
/* Adds the folders and files of src to dst (a file named in both: src's
 * word), as if src's change followed dst's; src naming everything makes
 * dst so. */
void tenant_gen_change_merge(tenant_gen_change *dst, const tenant_gen_change *src);

/* Under the tenant's lock: reads the state file fd, appends c as the next
 * generation, and writes the counter and the record back in one pwrite.
 * Returns the new generation (> 0) with *ret_prev the one before, or 0 when
 * the file could not be written. */
uint64_t tenant_gen_bump(int fd, const tenant_gen_change *c, uint64_t *ret_prev);

/* Without the lock: what changed since generation since (seen: a
 * generation this host saw; false: none). Returns 0 when the generation is
 * since (nothing to tell), 1 with *ret filled (its dirs, or all) otherwise.
 * *ret_gen: the generation read, and *ret_read whether the file could be
 * read at all (else *ret names everything). A record torn by a writer in
 * the middle of its pwrite fails its check and names everything. */
int tenant_gen_since(int fd, uint64_t since, bool seen, tenant_gen_change *ret, uint64_t *ret_gen,
                     bool *ret_read);

#endif
